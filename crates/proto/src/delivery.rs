//! The delivery record (docs/protocol.md "Delivery"): the append-only life of every direct
//! message, `stored → claimed → started → consumed` (or `requeued`, `failed`, `parked`), and
//! the per-session fence naming the one runner instance allowed to write it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest runner instance id accepted.
pub const INSTANCE_MAX: usize = 128;
/// Longest `outcome` / `reason` text accepted, in characters.
pub const NOTE_MAX: usize = 2000;
/// Default page of `GET /delivery?session=&open=1`.
pub const OPEN_DEFAULT: usize = 200;
/// Largest page of `GET /delivery?session=&open=1`.
pub const OPEN_MAX: usize = 1000;

/// Declares [`DeliveryState`] and [`MarkState`] from one list of states with their wire names:
/// the hub's own first, then those a runner may mark (each also a [`MarkState`]).
macro_rules! delivery_states {
    (
        $(#[doc = $hub_doc:literal])* $hub:ident = $hub_wire:literal,
        $($(#[doc = $doc:literal])* $state:ident = $wire:literal,)*
    ) => {
        /// One state of a message's life.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
            JsonSchema,
        )]
        pub enum DeliveryState {
            $(#[doc = $hub_doc])*
            #[serde(rename = $hub_wire)]
            $hub,
            $(
                $(#[doc = $doc])*
                #[serde(rename = $wire)]
                $state,
            )*
        }

        /// The states a runner may mark (everything but the hub's own `stored`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        pub enum MarkState {
            $(
                #[doc = concat!("See [`DeliveryState::", stringify!($state), "`].")]
                #[serde(rename = $wire)]
                $state,
            )*
        }

        impl DeliveryState {
            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self {
                    DeliveryState::$hub => $hub_wire,
                    $(DeliveryState::$state => $wire,)*
                }
            }

            /// The state named `s` on the wire.
            pub fn parse(s: &str) -> Option<DeliveryState> {
                match s {
                    $hub_wire => Some(DeliveryState::$hub),
                    $($wire => Some(DeliveryState::$state),)*
                    _ => None,
                }
            }
        }

        impl From<MarkState> for DeliveryState {
            fn from(m: MarkState) -> DeliveryState {
                match m {
                    $(MarkState::$state => DeliveryState::$state,)*
                }
            }
        }
    };
}

delivery_states! {
    /// Written by the hub in the same commit as the message.
    Stored = "stored",
    /// A runner took the message from a poll and persisted it to its own disk.
    Claimed = "claimed",
    /// The runner durably recorded the turn and is about to spawn (or has spawned) the CLI.
    Started = "started",
    /// The turn ended and the message counts as acted on (terminal).
    Consumed = "consumed",
    /// The message will run again (`reason` says why).
    Requeued = "requeued",
    /// Terminal, never retried (`reason`).
    Failed = "failed",
    /// Held while the seat is parked (`reason`); still open.
    Parked = "parked",
}

impl DeliveryState {
    /// `consumed` and `failed` end a message's life; every other state leaves it open.
    pub fn is_terminal(self) -> bool {
        matches!(self, DeliveryState::Consumed | DeliveryState::Failed)
    }
}

impl std::fmt::Display for DeliveryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a message's delivery record, as stored and as `GET /delivery?id=` returns it
/// (absent fields are `null`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryEntry {
    /// The state entered.
    pub state: DeliveryState,
    /// Hub time it was recorded, ms (for `stored`: the message's own ts).
    pub ts: i64,
    /// The session the message is addressed to (the seat that marked it).
    pub session: String,
    /// The runner instance that marked it (`null` for `stored`).
    #[serde(default)]
    pub instance: Option<String>,
    /// The runner's turn number.
    #[serde(default)]
    pub turn: Option<u64>,
    /// The agent CLI's pid, when known.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The turn's verdict (`consumed`).
    #[serde(default)]
    pub outcome: Option<String>,
    /// Why (`requeued`, `failed`, `parked`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /delivery/fence` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryFenceRequest {
    /// The seat's session.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub session: String,
    /// The runner instance that now owns the session.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = INSTANCE_MAX), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub instance: String,
}

/// `POST /delivery/fence` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryFenceReply {
    /// Always true.
    pub ok: bool,
    /// The session.
    pub session: String,
    /// The instance now current.
    pub instance: String,
    /// The instance it superseded (`null` when none, or the same one again).
    pub previous: Option<String>,
}

/// `POST /delivery` body: one state of one message, marked by a runner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryMark {
    /// The message id.
    pub id: i64,
    /// The session the message is addressed to.
    #[schemars(length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub session: String,
    /// The marking runner instance (must be the session's fenced one).
    #[schemars(length(min = 1, max = INSTANCE_MAX), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub instance: String,
    /// The state entered.
    pub state: MarkState,
    /// The runner's turn number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 9_223_372_036_854_775_807_u64))]
    pub turn: Option<u64>,
    /// The CLI's pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4_294_967_295_u32))]
    pub pid: Option<u32>,
    /// The turn's verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = NOTE_MAX))]
    pub outcome: Option<String>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = NOTE_MAX))]
    pub reason: Option<String>,
}

impl DeliveryMark {
    /// A mark of `state` for message `id` of `session` by `instance`, with no details.
    pub fn new(
        id: i64,
        session: impl Into<String>,
        instance: impl Into<String>,
        state: MarkState,
    ) -> Self {
        DeliveryMark {
            id,
            session: session.into(),
            instance: instance.into(),
            state,
            turn: None,
            pid: None,
            outcome: None,
            reason: None,
        }
    }
}

/// `POST /delivery` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryMarkReply {
    /// Always true.
    pub ok: bool,
    /// The message id.
    pub id: i64,
    /// The state marked.
    pub state: DeliveryState,
    /// False when the same (id, state, instance, turn) was already recorded (a retry).
    pub appended: bool,
}

/// `GET /delivery?id=N` reply: the whole life of one message, in append order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryRecord {
    /// The message id.
    pub id: i64,
    /// Its recipient.
    pub to: String,
    /// Every state, oldest first.
    pub states: Vec<DeliveryEntry>,
}

impl DeliveryRecord {
    /// The latest state, if any.
    pub fn current(&self) -> Option<&DeliveryEntry> {
        self.states.last()
    }
}

/// One open message of a session: its latest state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryOpenItem {
    /// The message id.
    pub id: i64,
    /// Its recipient.
    pub to: String,
    /// The latest state (never `consumed` or `failed`).
    pub state: DeliveryState,
    /// When that state was recorded, ms.
    pub ts: i64,
    /// The turn of that state.
    #[serde(default)]
    pub turn: Option<u64>,
    /// The instance of that state.
    #[serde(default)]
    pub instance: Option<String>,
    /// The reason of that state.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `GET /delivery?session=S&open=1` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryOpen {
    /// The session.
    pub session: String,
    /// Its open messages, oldest first (at most `limit`).
    pub open: Vec<DeliveryOpenItem>,
    /// How many are open in all.
    pub total: i64,
}

/// The reply of `GET /delivery`, for the API document: a [`DeliveryRecord`] (`id=N`) or a
/// [`DeliveryOpen`] (`session=S`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum DeliveryReply {
    /// `GET /delivery?id=N`.
    Record(DeliveryRecord),
    /// `GET /delivery?session=S&open=1`.
    Open(DeliveryOpen),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_marks_exclude_stored() {
        for s in [
            DeliveryState::Stored,
            DeliveryState::Claimed,
            DeliveryState::Started,
            DeliveryState::Consumed,
            DeliveryState::Requeued,
            DeliveryState::Failed,
            DeliveryState::Parked,
        ] {
            assert_eq!(DeliveryState::parse(s.as_str()), Some(s));
            let j = serde_json::to_string(&s).expect("encode");
            assert_eq!(j, format!("\"{s}\""));
        }
        assert!(serde_json::from_str::<MarkState>("\"stored\"").is_err());
        let m: DeliveryMark = serde_json::from_str(
            r#"{"id":3,"session":"s","instance":"i","state":"started","turn":2,"pid":77}"#,
        )
        .expect("decode");
        assert_eq!(m.state, MarkState::Started);
        assert_eq!((m.turn, m.pid), (Some(2), Some(77)));
        let e: DeliveryEntry =
            serde_json::from_str(r#"{"state":"stored","ts":1,"session":"s"}"#).expect("entry");
        assert_eq!(e.instance, None);
        let v = serde_json::to_value(&e).expect("encode");
        assert!(v.get("instance").is_some_and(|x| x.is_null()));
    }
}

/// `POST /contracts/reroute` body: the seat holding a contract it cannot run (its credential is
/// spent or refused) asks the hub to move it to a live seat of another agent (docs/protocol.md
/// §5.9; only where the project's `reroute` dial is on).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RerouteRequest {
    /// The held message.
    #[schemars(range(min = 1))]
    pub id: i64,
    /// The seat holding it (the message's recipient).
    #[schemars(length(min = 1, max = crate::limits::SESSION))]
    pub session: String,
    /// Why it cannot run it (`credential work exhausted until …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = NOTE_MAX))]
    pub reason: Option<String>,
}

/// `POST /contracts/reroute` reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RerouteReply {
    /// True on success.
    pub ok: bool,
    /// The seat the contract went to.
    pub to: String,
    /// The id of the contract as sent to it.
    pub id: i64,
    /// It had been rerouted before (this call changed nothing).
    pub again: bool,
}
