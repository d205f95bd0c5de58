//! The transaction traits the hub runs its closures against, with what every backend shares as
//! their default methods: each query or write that is the same decision in every backend is
//! written here once, over the backend's statements ([`Statements`]); a backend implements only
//! the writes whose steps differ (how a message, an event or a delivery state is inserted, and
//! retention).

use serde_json::Value;
use trantor_proto::{
    Card, CostSummary, DeliveryEntry, DeliveryOpenItem, Event, Lesson, Message, Peer, TurnReport,
};

use crate::rows::{self, encode};
use crate::sql::{self, Arg, Common, Dialect, Statements, bind};
use crate::tally::{self, EdgeCounts, LedgerWindow, OpenBucket, OpenTally, TallyRow, TallyRows};
use crate::{
    CardFilter, ContractRow, CostBy, CostQuery, Counts, EventFilter, LedgerQuery, NewEvent,
    NewMessage, OpRecord, OpenGroup, PruneReport, ReapedContract, StoreError,
};

/// Queries available inside any transaction.
pub trait ReadTx: Statements {
    /// The highest message id ever assigned (0 when none), even if that message was pruned.
    fn tip(&self) -> Result<i64, StoreError> {
        bind(self, Dialect::Tip, &[]).number()
    }
    /// Messages deliverable to `session` (to it or to `all`, not from it) with `id > since`,
    /// oldest first, at most `limit`.
    fn messages_for(
        &self,
        session: &str,
        since: i64,
        limit: usize,
    ) -> Result<Vec<Message>, StoreError> {
        let args = [Arg::Text(session), Arg::Int(since), Arg::Limit(limit)];
        bind(self, Dialect::MessagesFor, &args).all(rows::message)
    }
    /// One message.
    fn message(&self, id: i64) -> Result<Option<Message>, StoreError> {
        bind(self, Common::Message, &[Arg::Int(id)]).one(rows::message)
    }
    /// The newest `limit` messages of every kind, oldest first.
    fn recent_messages(&self, limit: usize) -> Result<Vec<Message>, StoreError> {
        let mut v = bind(self, Common::RecentMessages, &[Arg::Limit(limit)]).all(rows::message)?;
        v.reverse();
        Ok(v)
    }
    /// Direct messages (not to `all`) sent by or to `session` with `ts >= since_ts`, oldest first.
    fn direct_messages_involving(
        &self,
        session: &str,
        since_ts: i64,
    ) -> Result<Vec<Message>, StoreError> {
        let args = [Arg::Text(session), Arg::Int(since_ts)];
        bind(self, Dialect::DirectMessagesInvolving, &args).all(rows::message)
    }
    /// Direct messages with `from_ts <= ts <= until_ts` that their recipient has not read yet
    /// (its `deliveredUpTo` is below the id, or it has no peer row), oldest first, at most
    /// `limit`. Broadcasts, messages to or from `hub:*`, `wake:false`, `status` and `receipt`
    /// messages are left out (for the duty service).
    fn undelivered_direct(
        &self,
        from_ts: i64,
        until_ts: i64,
        limit: usize,
    ) -> Result<Vec<Message>, StoreError> {
        let args = [Arg::Int(from_ts), Arg::Int(until_ts), Arg::Limit(limit)];
        bind(self, Dialect::UndeliveredDirect, &args).all(rows::message)
    }
    /// Sessions that sent a direct message with `ts >= since_ts` (for the contract reaper).
    fn dispatchers_since(&self, since_ts: i64) -> Result<Vec<String>, StoreError> {
        bind(self, Dialect::DispatchersSince, &[Arg::Int(since_ts)]).all(|c| c.text(0))
    }
    /// Senders with open contracts sent at or after `since_ts` (for the contract reaper; costs
    /// the open contracts, not the traffic).
    fn ledger_senders(&self, since_ts: i64) -> Result<Vec<String>, StoreError> {
        bind(self, Dialect::LedgerSenders, &[Arg::Int(since_ts)]).all(|c| c.text(0))
    }
    /// Every contract the reaper recorded (a full scan: for `hub export`, not a route).
    fn ledger_reaped(&self) -> Result<Vec<ReapedContract>, StoreError> {
        bind(self, Common::LedgerReaped, &[]).all(rows::reaped)
    }
    /// The sender's ledger in the window from one read of its tally and of the window's first
    /// bucket's rows: the open contracts per assignee (by assignee; `superseded` and `overdue`
    /// left 0 until [`ReadTx::ledger_split`] fills them), the
    /// closed ones counted, and the open buckets every assignee's [`ReadTx::ledger_split`]
    /// plans from.
    fn ledger_window(&self, q: &LedgerQuery) -> Result<LedgerWindow, StoreError> {
        let args = [
            Arg::Text(&q.sender),
            Arg::Int(q.edge_bucket()),
            Arg::OptText(q.project.as_deref()),
        ];
        let mut read = TallyRows::default();
        bind(self, Dialect::LedgerTally, &args).all(|c| {
            let open = OpenBucket {
                bucket: c.int(1)?,
                open: c.int(2)?,
                min_id: c.int(5)?,
                max_id: c.int(6)?,
            };
            let row = TallyRow {
                open,
                ack: c.int(3)?,
                answered: c.int(4)?,
            };
            // The assignee is copied the first time it is seen, not once a row.
            c.with_text(0, &mut |assignee| read.push(assignee, row))
        })?;
        let args = [
            Arg::Text(&q.sender),
            Arg::Int(q.since_ts),
            Arg::OptText(q.project.as_deref()),
            Arg::Int(q.edge_bucket()),
            Arg::Int(q.edge_end()),
        ];
        let edge = bind(self, Dialect::LedgerEdge, &args).all(|c| {
            Ok(EdgeCounts {
                assignee: c.text(0)?,
                open: c.int(1)?,
                answered: c.int(2)?,
                ack: c.int(3)?,
            })
        })?;
        Ok(tally::window(q.edge_bucket(), read, edge))
    }
    /// Fill `g`'s superseded and overdue counts (asked only for an assignee that is not
    /// abandoned), from `tally` ([`ReadTx::ledger_window`]): each a difference of
    /// [`ReadTx::ledger_open_before`] counts, so it costs the rows of the few buckets the cuts
    /// fall in, not the open contracts.
    fn ledger_split(
        &self,
        q: &LedgerQuery,
        tally: &OpenTally,
        g: &mut OpenGroup,
    ) -> Result<(), StoreError> {
        let cut = bind(
            self,
            Common::LedgerPeerCut,
            &[Arg::Text(&q.sender), Arg::Text(&g.assignee)],
        )
        .one(|c| Ok(c.int(0)?.max(c.int(1)?)))?
        .unwrap_or(0);
        let buckets = tally.buckets(&g.assignee);
        let before = |ts, id| self.ledger_open_before(q, &g.assignee, buckets, ts, id);
        // Superseded: sent before the supersede cut and overtaken (an id below the pair's cut).
        g.superseded = before(q.supersede_cut, cut)?;
        // Overdue: sent at or before the overdue cut, and not superseded.
        g.overdue = match q.overdue_cut {
            None => 0,
            Some(o) => {
                let upto = o.saturating_add(1);
                before(upto, i64::MAX)? - before(upto.min(q.supersede_cut), cut)?
            }
        };
        Ok(())
    }
    /// How many of the sender's open contracts in the window to `assignee` were sent before
    /// `before_ts` with an id below `below_id`: the assignee's `buckets` wholly inside summed,
    /// the rows of the buckets the cuts fall in counted ([`tally::open_before`]).
    fn ledger_open_before(
        &self,
        q: &LedgerQuery,
        assignee: &str,
        buckets: &[OpenBucket],
        before_ts: i64,
        below_id: i64,
    ) -> Result<i64, StoreError> {
        let (mut n, ranges) = tally::open_before(buckets, q.since_ts, before_ts, below_id);
        for r in ranges {
            let args = [
                Arg::Text(&q.sender),
                Arg::Text(assignee),
                Arg::Int(r.from_ts),
                Arg::Int(r.until_ts),
                Arg::Int(r.below_id),
                Arg::OptText(q.project.as_deref()),
            ];
            let c = bind(self, Dialect::LedgerCountOpen, &args)
                .one(|c| c.int(0))?
                .unwrap_or(0);
            n += if r.subtract { -c } else { c };
        }
        Ok(n)
    }
    /// Up to `limit` of the sender's contracts in the window with ids above `after`, oldest
    /// first; `open_only` keeps the unanswered owed ones.
    fn ledger_rows(
        &self,
        q: &LedgerQuery,
        after: i64,
        limit: usize,
        open_only: bool,
    ) -> Result<Vec<ContractRow>, StoreError> {
        let args = [
            Arg::Text(&q.sender),
            Arg::Int(q.since_ts),
            Arg::OptText(q.project.as_deref()),
            Arg::Int(after),
            Arg::Limit(limit),
        ];
        bind(self, Dialect::LedgerRows { open_only }, &args).all(rows::contract)
    }
    /// Up to `limit` of the sender's open contracts in the window to `assignee` that the reaper
    /// has not recorded, after `(ts, id)` `after`, in `(ts, id)` order, each page at the cost of
    /// the page (the reaper pages an abandoned assignee's contracts with it).
    fn ledger_unreaped(
        &self,
        q: &LedgerQuery,
        assignee: &str,
        after: (i64, i64),
        limit: usize,
    ) -> Result<Vec<ContractRow>, StoreError> {
        let args = [
            Arg::Text(&q.sender),
            Arg::Int(q.since_ts),
            Arg::Text(assignee),
            Arg::Int(after.0),
            Arg::Int(after.1),
            Arg::Limit(limit),
        ];
        bind(self, Dialect::LedgerUnreaped, &args).all(rows::contract)
    }
    /// The `(ts, id)` keys of the sender's open contracts in the window to `assignee` after the
    /// key `after` (`None`: from the window's start), the first `limit` in `(ts, id)` order (the
    /// open index alone: no row is read, and a chunk costs the chunk).
    fn ledger_open_ids(
        &self,
        q: &LedgerQuery,
        assignee: &str,
        after: Option<(i64, i64)>,
        limit: usize,
    ) -> Result<Vec<(i64, i64)>, StoreError> {
        let (ts, id) = after.unwrap_or((i64::MIN, i64::MIN));
        let args = [
            Arg::Text(&q.sender),
            Arg::Int(q.since_ts),
            Arg::Text(assignee),
            Arg::Int(ts),
            Arg::Int(id),
            Arg::Limit(limit),
        ];
        bind(self, Dialect::LedgerOpenIds, &args).all(|c| Ok((c.int(0)?, c.int(1)?)))
    }
    /// One contract of `sender`'s ledger.
    fn ledger_row(&self, sender: &str, id: i64) -> Result<Option<ContractRow>, StoreError> {
        bind(self, Dialect::LedgerRow, &[Arg::Text(sender), Arg::Int(id)]).one(rows::contract)
    }
    /// The newest `limit` messages citing card `#card`, oldest first.
    fn messages_citing(&self, card: i64, limit: usize) -> Result<Vec<Message>, StoreError> {
        let args = [Arg::Int(card), Arg::Limit(limit)];
        bind(self, Common::MessagesCiting, &args).all(rows::message)
    }
    /// One peer row.
    fn peer(&self, session: &str) -> Result<Option<Peer>, StoreError> {
        bind(self, Common::Peer, &[Arg::Text(session)]).one(rows::peer)
    }
    /// Every peer row.
    fn peers(&self) -> Result<Vec<Peer>, StoreError> {
        bind(self, Common::Peers, &[]).all(rows::peer)
    }
    /// One card.
    fn card(&self, id: i64) -> Result<Option<Card>, StoreError> {
        bind(self, Common::Card, &[Arg::Int(id)]).one(rows::card)
    }
    /// Cards matching the filter, by id ascending.
    fn cards(&self, filter: &CardFilter) -> Result<Vec<Card>, StoreError> {
        let q = sql::cards_query(self.param_style(), filter);
        q.bind(self, ("cards", "cards")).all(rows::card)
    }
    /// Events matching the filter, oldest first.
    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError> {
        let select = self.sql(Dialect::EventsSelect);
        let Some(q) = sql::events_query(self.param_style(), &select, filter) else {
            return Ok(Vec::new());
        };
        let mut events = q
            .bind(self, Dialect::EventsSelect.origin())
            .all(rows::event)?;
        events.reverse();
        Ok(events)
    }
    /// The newest event id (0 when none).
    fn latest_event_id(&self) -> Result<i64, StoreError> {
        bind(self, Dialect::LatestEventId, &[]).number()
    }
    /// Lessons whose scope is one of `scopes`, oldest first.
    fn lessons(&self, scopes: &[String]) -> Result<Vec<Lesson>, StoreError> {
        if scopes.is_empty() {
            return Ok(Vec::new());
        }
        let q = sql::lessons_query(self.param_style(), scopes);
        q.bind(self, ("lessons", "lessons")).all(rows::lesson)
    }
    /// A small named JSON document (policy, project briefs, phase goals, …).
    fn kv(&self, key: &str) -> Result<Option<Value>, StoreError> {
        let raw = bind(self, Common::Kv, &[Arg::Text(key)]).one(|c| c.text(0))?;
        raw.map(|s| rows::decode_json("kv", key, &s)).transpose()
    }
    /// Every small document whose key starts with `prefix`, ordered by key (a project's phase
    /// goals).
    fn kv_prefix(&self, prefix: &str) -> Result<Vec<(String, Value)>, StoreError> {
        // Keys compare bytewise: every key starting with `prefix` sorts in
        // [prefix, prefix + U+10FFFF).
        let args = [Arg::Text(prefix), Arg::Owned(format!("{prefix}\u{10FFFF}"))];
        bind(self, Common::KvPrefix, &args).all(rows::kv)
    }
    /// The recorded outcome of an `_op`.
    fn op(&self, id: &str) -> Result<Option<OpRecord>, StoreError> {
        bind(self, Common::Op, &[Arg::Text(id)]).one(rows::op)
    }
    /// Row counts.
    fn counts(&self) -> Result<Counts, StoreError> {
        let counts = bind(self, Dialect::Counts, &[]).one(rows::counts)?;
        counts.ok_or_else(|| StoreError::db("counts: no row"))
    }
    /// Every lesson, oldest first (for `trantor hub export`).
    fn all_lessons(&self) -> Result<Vec<Lesson>, StoreError> {
        bind(self, Common::AllLessons, &[]).all(rows::lesson)
    }
    /// The delivery record of message `id`, in append order: first `stored`, made from the
    /// message itself (its time and recipient), then the logged states. Empty for a broadcast
    /// and for an unknown id.
    fn delivery_states(&self, id: i64) -> Result<Vec<DeliveryEntry>, StoreError> {
        bind(self, Common::DeliveryStates, &[Arg::Int(id)]).all(|c| rows::delivery_entry(id, c))
    }
    /// The direct messages to `session` whose latest delivery state is not terminal (`consumed`,
    /// `failed`), oldest first, at most `limit` (0: no limit), with how many there are in all.
    fn delivery_open(
        &self,
        session: &str,
        limit: usize,
    ) -> Result<(Vec<DeliveryOpenItem>, i64), StoreError> {
        let args = [Arg::Text(session), Arg::Limit(limit)];
        let items = bind(self, Common::DeliveryOpen, &args)
            .all(|c| rows::delivery_open_item(session, c))?;
        let total = bind(self, Common::DeliveryOpenCount, &args[..1]).number()?;
        Ok((items, total))
    }
    /// The runner instance `session` is fenced to, if any.
    fn delivery_fence(&self, session: &str) -> Result<Option<String>, StoreError> {
        bind(self, Common::DeliveryFence, &[Arg::Text(session)]).one(|c| c.text(0))
    }
    /// Every recorded turn with its hub time, oldest first (a full scan: for `hub export`, not
    /// a route).
    fn all_turns(&self) -> Result<Vec<(i64, TurnReport)>, StoreError> {
        bind(self, Common::AllTurns, &[]).all(rows::turn)
    }
    /// The recorded turns matching `q`, added up per `by` group, at most `limit` groups (0: no
    /// limit), largest dollars first (then key). [`CostBy::Total`] is one group (all zeros when
    /// nothing matches).
    fn cost(
        &self,
        q: &CostQuery,
        by: CostBy,
        limit: usize,
    ) -> Result<Vec<(String, CostSummary)>, StoreError> {
        let select = self.sql(Dialect::CostSelect(by));
        let Some(q) = sql::cost_query(self.param_style(), &select, q, by, limit) else {
            return Ok(Vec::new());
        };
        let origin = Dialect::CostSelect(by).origin();
        q.bind(self, origin).all(|c| rows::cost(by, c))
    }
}

/// Changes available inside a write transaction.
pub trait WriteTx: ReadTx {
    /// Store a message, assigning the next id; `refs` are the card ids it cites.
    fn insert_message(&mut self, msg: NewMessage, refs: &[i64]) -> Result<Message, StoreError>;
    /// Insert or replace a peer row (the `deliveredUpTo` stored never decreases).
    fn put_peer(&mut self, peer: &Peer) -> Result<(), StoreError> {
        let data = encode("peers", peer)?;
        let args = [
            Arg::Text(&peer.session),
            Arg::Int(peer.last_seen),
            Arg::Int(peer.delivered_up_to),
            Arg::Text(&data),
        ];
        bind(self, Dialect::PutPeer, &args).execute()?;
        Ok(())
    }
    /// Raise each listed session's `lastSeen` to its value (never lowers it; a session with no
    /// peer row is skipped): the presence flush, which lists every session with a held poll.
    /// Touches only the column the peer's read overlays, so no row is read first.
    fn touch_peers(&mut self, seen: &[(String, i64)]) -> Result<(), StoreError> {
        for (session, ts) in seen {
            bind(
                self,
                Common::TouchPeer,
                &[Arg::Text(session), Arg::Int(*ts)],
            )
            .execute()?;
        }
        Ok(())
    }
    /// Raise a session's delivery ledger to `up_to` (never lowers it); returns the new value.
    fn raise_delivered(&mut self, session: &str, up_to: i64) -> Result<i64, StoreError> {
        // An unknown session gets a bare row (last_seen 0) so its ledger is never lost; the
        // hub's peer TTL keeps such a row out of `/peers`.
        let args = [Arg::Text(session), Arg::Int(up_to)];
        let raised = bind(self, Dialect::RaiseDelivered, &args).one(|c| c.int(0))?;
        raised.ok_or_else(|| StoreError::db("peers: raise_delivered returned no row"))
    }
    /// Delete peers last seen before `last_seen`; returns their sessions.
    fn delete_peers_before(&mut self, last_seen: i64) -> Result<Vec<String>, StoreError> {
        bind(self, Common::DeletePeersBefore, &[Arg::Int(last_seen)]).all(|c| c.text(0))
    }
    /// Delete peers that never registered (`registered` unset) last seen before `last_seen`;
    /// returns their sessions.
    fn delete_anonymous_peers_before(&mut self, last_seen: i64) -> Result<Vec<String>, StoreError> {
        let args = [Arg::Int(last_seen)];
        bind(self, Dialect::DeleteAnonymousPeersBefore, &args).all(|c| c.text(0))
    }
    /// Store a new card, assigning the next id (the given id is ignored).
    fn insert_card(&mut self, mut card: Card) -> Result<Card, StoreError> {
        let id = bind(self, Dialect::ReserveCardId, &[]).one(|c| c.int(0))?;
        card.id = id.ok_or_else(|| StoreError::db("cards: no id was reserved"))?;
        self.put_card(&card)?;
        Ok(card)
    }
    /// Replace an existing card (an upsert: replacing a missing id inserts it, which is how an
    /// import keeps the original ids; later new cards are numbered above it).
    fn put_card(&mut self, card: &Card) -> Result<(), StoreError> {
        let data = encode("cards", card)?;
        let args = [
            Arg::Int(card.id),
            Arg::Text(&card.project),
            Arg::Text(card.status.as_str()),
            Arg::Text(&card.assignee),
            Arg::Int(card.updated),
            Arg::Text(&data),
        ];
        bind(self, Dialect::PutCard, &args).execute()?;
        Ok(())
    }
    /// Delete a card.
    fn delete_card(&mut self, id: i64) -> Result<(), StoreError> {
        bind(self, Common::DeleteCard, &[Arg::Int(id)]).execute()?;
        Ok(())
    }
    /// Append an event, assigning the next id.
    fn insert_event(&mut self, event: NewEvent) -> Result<Event, StoreError>;
    /// Append a lesson, assigning the next id (ids are never reused).
    fn insert_lesson(&mut self, mut lesson: Lesson) -> Result<Lesson, StoreError> {
        let args = [
            Arg::Text(&lesson.scope),
            Arg::Text(&lesson.text),
            Arg::Text(&lesson.by),
            Arg::Int(lesson.ts),
            Arg::Text(&lesson.project),
        ];
        let id = bind(self, Common::InsertLesson, &args).one(|c| c.int(0))?;
        lesson.id = id.ok_or_else(|| StoreError::db("lessons: insert returned no id"))?;
        Ok(lesson)
    }
    /// Set a named JSON document.
    fn set_kv(&mut self, key: &str, value: &Value) -> Result<(), StoreError> {
        let data = encode("kv", value)?;
        bind(self, Common::SetKv, &[Arg::Text(key), Arg::Text(&data)]).execute()?;
        Ok(())
    }
    /// Record an `_op` outcome. The first final record (code ≠ 0) wins; a code-0 record is a
    /// marker ("committed, reply pending") that a later record replaces.
    fn put_op(&mut self, op: &OpRecord) -> Result<(), StoreError> {
        let body = encode("ops", &op.body)?;
        let args = [
            Arg::Text(&op.id),
            Arg::Int(op.ts),
            Arg::Int(i64::from(op.code)),
            Arg::Text(&body),
        ];
        bind(self, Common::PutOp, &args).execute()?;
        Ok(())
    }
    /// Store a message under the id it already has (`trantor hub import`), with the card ids
    /// it cites; `false` (and nothing changed) when a message with that id exists. Later
    /// [`WriteTx::insert_message`] ids continue above the highest id, and the tip and counts
    /// stay exact.
    fn put_message(&mut self, msg: &Message, refs: &[i64]) -> Result<bool, StoreError>;
    /// Take what a backend's contract ledger writes hold, before a write of the ledger's rows
    /// outside its own upkeep (the reaper's records). Nothing (the default) where the ledger is
    /// kept in each commit; PostgreSQL's ledger passes run beside the writer and take a lock.
    fn lock_ledger(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Record the reaper's verdict on contract `id` of `sender` (first record wins); returns
    /// whether it was recorded now.
    fn mark_reaped(
        &mut self,
        sender: &str,
        id: i64,
        ts: i64,
        reason: &str,
    ) -> Result<bool, StoreError> {
        self.lock_ledger()?;
        let args = [
            Arg::Text(sender),
            Arg::Int(id),
            Arg::Int(ts),
            Arg::Text(reason),
        ];
        Ok(bind(self, Common::MarkReaped, &args).execute()? > 0)
    }
    /// Append one state to message `id`'s delivery record (`entry.session` is its recipient).
    /// The record is only ever appended to; a terminal state closes the message for
    /// [`ReadTx::delivery_open`]. `stored` is not logged: the message itself is that state
    /// (its time and recipient), so it only opens the message (a second `stored` changes
    /// nothing) and [`ReadTx::delivery_states`] reads it back from the message — one row and
    /// two index entries fewer per `/send`.
    fn append_delivery(&mut self, id: i64, entry: &DeliveryEntry) -> Result<(), StoreError>;
    /// Fence `session` to runner `instance` at `ts`; returns the instance it replaced (`None`
    /// when there was none).
    fn set_delivery_fence(
        &mut self,
        session: &str,
        instance: &str,
        ts: i64,
    ) -> Result<Option<String>, StoreError> {
        let previous = self.delivery_fence(session)?;
        let args = [Arg::Text(session), Arg::Text(instance), Arg::Int(ts)];
        bind(self, Common::SetDeliveryFence, &args).execute()?;
        Ok(previous)
    }
    /// Record one finished turn's cost at hub time `ts`; `false` (and nothing changed) when a
    /// turn with the same `(session, instance, turn)` is already recorded.
    fn record_turn(&mut self, ts: i64, turn: &TurnReport) -> Result<bool, StoreError> {
        let args = rows::turn_args(ts, turn);
        Ok(bind(self, Dialect::RecordTurn, &args).execute()? == 1)
    }
    /// Retention: remove messages older than `before_ts` that every recipient has read
    /// (broadcasts, or direct messages at or below the recipient's `deliveredUpTo`) with their
    /// delivery records, non-card events older than `before_ts`, and `_op` records older than
    /// `ops_before_ts`.
    fn prune(&mut self, before_ts: i64, ops_before_ts: i64) -> Result<PruneReport, StoreError>;
}
