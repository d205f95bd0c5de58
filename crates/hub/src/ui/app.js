// trantor dashboard: board, seats, flow and timeline over the hub's own routes, live over SSE.
// Plain script, no dependencies. Everything shown comes from the hub; nothing is invented here.
'use strict';
(() => {
  const COLUMNS = [
    { key: 'todo', label: 'To do', holds: ['todo', 'stale'] },
    { key: 'doing', label: 'Doing', holds: ['doing'] },
    { key: 'testing', label: 'Testing', holds: ['testing', 'failed'] },
    { key: 'done', label: 'Done', holds: ['done'] },
    { key: 'blocked', label: 'Blocked', holds: ['blocked'] },
  ];
  const STATUSES = ['todo', 'doing', 'testing', 'failed', 'done', 'blocked'];
  const CARD_EVENTS = new Set(['created', 'moved', 'updated', 'deleted']);
  const TIMELINE_MAX = 5000;
  const CATCHUP_LIMIT = 2000;

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, ...kids) => {
    const n = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') n.className = v;
        else if (k === 'text') n.textContent = v;
        else n.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const k of kids) if (k !== null && k !== undefined) n.append(k);
    return n;
  };

  // ---------- state ----------
  const params = new URLSearchParams(location.search);
  const S = {
    project: params.get('project') || localStorage.getItem('trantor.project') || '',
    me: params.get('as') || localStorage.getItem('trantor.me') || '',
    view: 'board',
    search: '',
    cards: new Map(), // id -> slim card with derived fields
    cardEls: new Map(), // id -> <li>
    peers: [],
    events: [], // the current project's events, oldest first
    seen: new Set(), // event ids applied
    cursor: 0, // highest event id processed (every project)
    projects: new Set(),
    messages: [],
    contracts: new Map(),
    delivery: new Map(), // message id -> its latest delivery state {state, turn, instance, reason, outcome}
    costs: { card: new Map(), seat: new Map(), day: [], total: null }, // GET /cost per card, seat, day
    es: null,
    catching: null,
  };
  const stats = { loadMs: 0, boardRenderMs: 0, lastApplyMs: 0, searchMs: 0, cards: 0, events: 0, opens: 0 };
  window.trantorUi = { stats, state: S };
  // Anything the Content-Security-Policy blocks is a bug in this page; the browser tests read this.
  stats.cspViolations = [];
  document.addEventListener('securitypolicyviolation', (e) => stats.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));

  // ---------- hub access ----------
  async function getJson(path) {
    const r = await fetch(path, { headers: { accept: 'application/json' }, cache: 'no-store' });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || `${path}: HTTP ${r.status}`);
    return body;
  }
  async function postJson(path, body) {
    body._op = `ui-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
    const r = await fetch(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(body),
    });
    const reply = await r.json().catch(() => ({}));
    if (!r.ok) {
      const e = new Error(reply.error || `HTTP ${r.status}`);
      e.status = r.status;
      throw e;
    }
    return reply;
  }
  const q = encodeURIComponent;

  // ---------- helpers ----------
  function ago(ms) {
    if (!ms) return '';
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m`;
    if (s < 86400) return `${Math.floor(s / 3600)}h`;
    return `${Math.floor(s / 86400)}d`;
  }
  const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
  const who = (session) => (session || '').replace(/:[^:]*$/, '') || session || '';
  let noticeTimer = 0;
  function notice(text, kind) {
    const n = $('notice');
    n.textContent = text;
    n.className = kind === 'info' ? 'notice info' : 'notice';
    n.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { n.hidden = true; }, kind === 'info' ? 4000 : 15000);
  }
  function matchesSearch(...texts) {
    if (!S.search) return true;
    return texts.some((t) => t && String(t).toLowerCase().includes(S.search));
  }
  function debounce(fn, ms) {
    let t = 0;
    return () => { clearTimeout(t); t = setTimeout(fn, ms); };
  }

  // ---------- cards ----------
  // Reduce a full card to what the board shows, computing the marks from its history and log.
  function derive(c) {
    const history = c.history || [];
    const bounces = history.filter((h) =>
      (h.from === 'testing' || h.from === 'done') && (h.to === 'doing' || h.to === 'todo' || h.to === 'failed')).length;
    const checklist = c.checklist || [];
    const log = c.log || [];
    const hasDrill = !!(c.drill && c.drill.trim()) ||
      checklist.some((i) => /^\s*drill:/i.test(i.text)) ||
      log.some((l) => /^\s*Drill:/.test(l.text));
    const lastMove = history.length ? history[history.length - 1].ts : c.ts;
    return {
      id: c.id, project: c.project, title: c.title, status: c.status, assignee: c.assignee || '',
      ts: c.ts, updated: c.updated, since: lastMove || c.ts, drill: c.drill || '',
      checklistDone: c.checklistDone ?? checklist.filter((i) => i.done).length,
      checklistCount: c.checklistCount ?? checklist.length,
      bounces: c.bounces ?? bounces, hasDrill: c.hasDrill ?? hasDrill,
      ask: c.status === 'blocked' ? (log.length ? log[log.length - 1].text : 'blocked') : '',
      deps: c.deps || [],
    };
  }
  // Dollars as the ledger knows them: `~` when estimated, `?` when every turn was unknown.
  function dollars(c) {
    if (!c || !c.turns) return '';
    if (c.unknown === c.turns) return '?';
    const d = c.usd >= 1 ? c.usd.toFixed(2) : c.usd.toFixed(4);
    return `${c.estimated ? '~' : ''}$${d}`;
  }
  function tokens(n) {
    n = n || 0;
    if (n < 10000) return String(n);
    if (n < 1e6) return `${(n / 1000).toFixed(1)}k`;
    return `${(n / 1e6).toFixed(1)}M`;
  }
  function costLine(c) {
    return `${dollars(c)} over ${c.turns} turn${c.turns === 1 ? '' : 's'} · ${tokens(c.tokensIn)} in (${tokens(c.cacheRead)} cache read) · ${tokens(c.tokensOut)} out${c.unknown ? ` · ${c.unknown} unknown` : ''}`;
  }
  async function loadCosts() {
    if (!S.project) return;
    const get = (by) => getJson(`/cost?project=${q(S.project)}&by=${by}`).catch(() => null);
    const [card, seat, day] = await Promise.all([get('card'), get('seat'), get('day')]);
    S.costs.card = new Map(((card && card.groups) || []).map((g) => [Number(g.key), g.cost]));
    S.costs.seat = new Map(((seat && seat.groups) || []).map((g) => [g.key, g.cost]));
    S.costs.day = ((day && day.groups) || []).slice().sort((a, b) => (a.key < b.key ? 1 : -1));
    S.costs.total = card ? card.total : null;
  }
  function renderCost() {
    const box = $('cost');
    const table = (caption, head, rows) => el('table', { class: 'cost-table' },
      el('caption', { text: caption }),
      el('thead', null, el('tr', null, ...[head, 'Turns', 'Tokens in', 'Tokens out', 'USD'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', null, ...rows.map(([k, c]) => el('tr', { 'data-key': k },
        el('th', { scope: 'row', text: k }), el('td', { text: String(c.turns) }), el('td', { text: tokens(c.tokensIn) }),
        el('td', { text: tokens(c.tokensOut) }), el('td', { text: dollars(c) }))))); 
    const t = S.costs.total;
    if (!t || !t.turns) {
      box.replaceChildren(el('p', { class: 'hint', text: `no turns recorded in ${S.project || 'this project'} yet` }));
      return;
    }
    box.replaceChildren(
      el('p', { id: 'cost-total', text: `${S.project}: ${costLine(t)}` }),
      table('Per day (UTC)', 'Day', S.costs.day.map((g) => [g.key, g.cost])),
      table('Per seat', 'Seat', [...S.costs.seat.entries()]),
      table('Per card', 'Card', [...S.costs.card.entries()].map(([id, c]) => [id ? `#${id} ${(S.cards.get(id) || {}).title || ''}` : '(no card)', c])));
  }
  function columnOf(status) {
    const col = COLUMNS.find((c) => c.holds.includes(status));
    return col ? col.key : 'todo';
  }
  function cardNode(c) {
    const marks = el('span', { class: 'marks' });
    if (c.status === 'failed') marks.append(el('span', { class: 'mark failed', text: 'failed' }), ' ');
    if (c.bounces) marks.append(el('span', { class: 'mark bounced', text: `bounced ×${c.bounces}` }), ' ');
    if (c.ask) marks.append(el('span', { class: 'mark ask', title: c.ask, text: 'open ask' }), ' ');
    if (c.status === 'testing' && !c.hasDrill) marks.append(el('span', { class: 'mark gate', title: 'moving to done needs a drill line', text: 'gate: no drill' }), ' ');
    const sel = MOVE_TEMPLATE.cloneNode(true);
    sel.setAttribute('aria-label', `Move card #${c.id}`);
    sel.dataset.move = c.id;
    sel.value = c.status;
    const li = el('li', {
      class: 'card', tabindex: 0, 'data-id': c.id, 'data-status': c.status,
      'aria-label': `Card #${c.id}: ${c.title}, ${c.status}${c.assignee ? `, assigned to ${c.assignee}` : ''}`,
    },
    el('div', { class: 't' }, el('span', { class: 'id', text: `#${c.id} ` }), c.title),
    el('div', { class: 'meta' },
      el('span', { text: c.assignee ? `@${who(c.assignee)}` : 'unassigned' }),
      el('span', { title: 'time in this status', text: ago(c.since) }),
      c.checklistCount ? el('span', { title: 'checklist', text: `☑ ${c.checklistDone}/${c.checklistCount}` }) : null,
      c.deps.length ? el('span', { text: `deps ${c.deps.map((d) => `#${d}`).join(' ')}` }) : null,
      S.costs.card.has(c.id) ? el('span', { class: 'cost', title: costLine(S.costs.card.get(c.id)), text: dollars(S.costs.card.get(c.id)) }) : null),
    c.drill ? el('div', { class: 'drill', text: `drill: ${c.drill}` }) : null,
    marks.childNodes.length ? marks : null,
    sel);
    li.hidden = !matchesSearch(`#${c.id}`, c.title, c.assignee, c.drill);
    return li;
  }
  // One picker built once and cloned per card: a thousand cards render without 6000 createElement calls.
  const MOVE_TEMPLATE = el('select', null, ...STATUSES.map((s) => el('option', { value: s, text: s })));
  function renderBoard() {
    const t0 = performance.now();
    const board = $('board');
    const lists = {};
    const frag = document.createDocumentFragment();
    for (const col of COLUMNS) {
      const ol = el('ol', { 'aria-labelledby': `col-${col.key}`, 'data-col': col.key });
      lists[col.key] = ol;
      frag.append(el('section', { class: 'col', 'data-col': col.key },
        el('h2', { id: `col-${col.key}` }, el('span', { text: col.label }), el('span', { class: 'count', text: '0' })),
        ol));
    }
    S.cardEls.clear();
    const sorted = [...S.cards.values()].sort((a, b) => (b.updated || 0) - (a.updated || 0));
    for (const c of sorted) {
      const n = cardNode(c);
      S.cardEls.set(c.id, n);
      lists[columnOf(c.status)].append(n);
    }
    board.replaceChildren(frag);
    updateCounts();
    stats.boardRenderMs = performance.now() - t0;
    stats.cards = S.cards.size;
    board.dataset.rendered = String(S.cards.size);
  }
  function updateCounts() {
    for (const sec of $('board').querySelectorAll('section.col')) {
      const shown = sec.querySelectorAll('li.card:not([hidden])').length;
      sec.querySelector('.count').textContent = String(shown);
    }
  }
  // Put one card's node in place (new, changed or deleted) without touching the others.
  function patchCard(c, deleted) {
    const old = S.cardEls.get(c.id);
    if (deleted) {
      S.cards.delete(c.id);
      if (old) old.remove();
      S.cardEls.delete(c.id);
      updateCounts();
      return;
    }
    S.cards.set(c.id, c);
    const fresh = cardNode(c);
    const list = $('board').querySelector(`ol[data-col="${columnOf(c.status)}"]`);
    if (!list) return;
    let n = fresh;
    if (old) {
      // Update the card's node in place: it keeps its identity, focus and move picker, so a
      // person using it is not interrupted by a live update.
      n = old;
      for (const a of [...n.attributes]) if (!fresh.hasAttribute(a.name)) n.removeAttribute(a.name);
      for (const a of [...fresh.attributes]) n.setAttribute(a.name, a.value);
      n.hidden = fresh.hidden;
      const keepSel = n.querySelector('select[data-move]');
      const kids = [...fresh.childNodes];
      const newSel = fresh.querySelector('select[data-move]');
      n.replaceChildren(...kids.map((k) => (k === newSel && keepSel ? keepSel : k)));
      if (keepSel) keepSel.value = c.status;
      if (n.parentElement !== list) list.prepend(n);
    } else {
      list.prepend(n);
    }
    S.cardEls.set(c.id, n);
    updateCounts();
  }
  const pendingCards = new Set();
  const flushCards = debounce(async () => {
    const ids = [...pendingCards];
    pendingCards.clear();
    for (const id of ids) {
      try {
        const r = await getJson(`/card?id=${id}`);
        if (r.task && r.task.project === S.project) {
          if (r.cost && r.cost.turns) S.costs.card.set(id, r.cost);
          if (r.task.status === 'deleted') patchCard({ id }, true);
          else patchCard(derive(r.task));
        }
      } catch (e) {
        if (!/no such card/.test(e.message)) console.warn(e);
      }
    }
  }, 120);
  function onCardEvent(e) {
    const id = e.taskId;
    if (!id) return;
    if (e.type === 'deleted') { patchCard({ id }, true); return; }
    // Show the move at once from the event; the full card follows.
    const prev = S.cards.get(id);
    const c = prev ? { ...prev } : derive({ id, project: e.project, title: e.title || '', status: e.to || 'todo', ts: e.ts, updated: e.ts });
    if (e.to) { c.status = e.to; c.since = e.ts; }
    if (e.title) c.title = e.title;
    if (typeof e.assignee === 'string') c.assignee = e.assignee;
    c.updated = e.ts;
    if (c.status !== 'blocked') c.ask = '';
    patchCard(c);
    pendingCards.add(id);
    flushCards();
  }
  async function loadBoard() {
    const [r] = await Promise.all([getJson(`/tasks?project=${q(S.project)}`), loadCosts()]);
    S.cards.clear();
    for (const t of r.tasks || []) S.cards.set(t.id, derive(t));
    renderBoard();
  }

  // Card detail: the whole card, its log, its events and the messages citing it.
  async function openCard(id) {
    const dlg = $('card-dialog');
    const body = $('cd-body');
    $('cd-title').textContent = `#${id}`;
    body.replaceChildren(el('p', { text: 'loading…' }));
    if (!dlg.open) dlg.showModal();
    let r;
    try {
      r = await getJson(`/card?id=${id}`);
    } catch (e) {
      body.replaceChildren(el('p', { class: 'err', text: e.message }));
      return;
    }
    const t = r.task || {};
    $('cd-title').textContent = `#${t.id} ${t.title || ''}`;
    const kv = el('dl', { class: 'kv' });
    const row = (k, v) => { if (v !== undefined && v !== null && v !== '') kv.append(el('dt', { text: k }), el('dd', { text: String(v) })); };
    row('status', t.status);
    row('assignee', t.assignee || 'unassigned');
    row('created', t.ts ? `${new Date(t.ts).toLocaleString()} by ${t.by || '?'}` : '');
    row('drill', t.drill);
    row('summary', t.summary);
    row('difficulty', t.difficulty);
    row('deps', (t.deps || []).map((d) => `#${d}`).join(' '));
    row('worked by', t.workedBy);
    row('closed by', t.closedBy);
    if (r.cost && r.cost.turns) row('cost', costLine(r.cost));
    const sel = el('select', { id: 'cd-move', 'aria-label': `Move card #${t.id}` });
    for (const s of STATUSES) sel.append(el('option', { value: s, selected: s === t.status, text: s }));
    const moveErr = el('p', { id: 'cd-move-error', class: 'err', role: 'alert' });
    const move = el('form', { class: 'inline-form' }, el('label', { for: 'cd-move', text: 'Move to' }), sel,
      el('button', { type: 'submit', text: 'Move' }));
    move.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      moveErr.textContent = '';
      const err = await moveCard(t.id, sel.value);
      if (err) moveErr.textContent = err;
      else openCard(t.id);
    });
    const checklist = (t.checklist || []).length
      ? el('ul', { class: 'log' }, ...t.checklist.map((i) => el('li', { text: `${i.done ? '☑' : '☐'} ${i.text}` })))
      : null;
    const log = el('ol', { class: 'log' }, ...(t.log || []).map((l) =>
      el('li', null, el('strong', { text: `${clock(l.ts)} ${l.by}: ` }), l.text)));
    const hist = el('ol', { class: 'log' }, ...(t.history || []).map((h) =>
      el('li', { text: `${clock(h.ts)} ${h.from ? `${h.from} → ` : ''}${h.to} by ${h.by}${h.note ? ` — ${h.note}` : ''}` })));
    const msgs = el('ol', { class: 'log' }, ...(r.messages || []).map((m) =>
      el('li', null, el('strong', { text: `${clock(m.ts)} ${m.from} → ${m.to}${m.kind ? ` (${m.kind})` : ''}: ` }), m.text)));
    body.replaceChildren(...[kv, move, moveErr,
      checklist ? el('h3', { text: 'Checklist' }) : null, checklist,
      el('h3', { text: `Log (${(t.log || []).length})` }), log,
      el('h3', { text: 'History' }), hist,
      el('h3', { text: `Messages citing #${t.id} (${(r.messages || []).length})` }), msgs].filter(Boolean));
  }

  // Returns the hub's refusal text, or '' when the move went through.
  async function moveCard(id, status) {
    try {
      await postJson('/task/update', { id, status, by: S.me });
      return '';
    } catch (e) {
      const text = `Card #${id} was not moved to ${status}: ${e.message}`;
      notice(text);
      const c = S.cards.get(id);
      if (c) patchCard(c); // put the select back to the card's real status
      return text;
    }
  }

  // ---------- seats ----------
  function seatState(p) {
    const phase = p.phase || '';
    const status = p.status || '';
    if (!p.online) return { text: `offline · last seen ${ago(p.lastSeen)} ago`, cls: 'offline', mark: ['offline', ''] };
    if (phase === 'parked' || /^parked\b/.test(status)) {
      const reason = (status.match(/parked \(([^)]*)\)/) || [])[1] || 'unknown reason';
      const until = (status.match(/until ([^·;,]+)/) || [])[1];
      // The runner registers `parked (<reason>) · until <when>` (docs/runner.md §12).
      return { text: `parked (${reason}) for ${ago(p.phaseSince)}${until ? ` · until ${until.trim()}` : ''}`, cls: 'failing', mark: ['parked', 'bad'] };
    }
    if (phase === 'stalled') return { text: `stalled for ${ago(p.phaseSince)} · ${status}`, cls: 'failing', mark: ['stalled', 'bad'] };
    if (p.health === 'errored' || p.health === 'down') return { text: status, cls: 'failing', mark: [p.health, 'bad'] };
    if (phase === 'working') {
      const card = [...S.cards.values()].find((c) => c.status === 'doing' && (c.assignee === p.session || c.assignee === who(p.session)));
      return { text: `in a turn${card ? ` on card #${card.id}` : ''} for ${ago(p.phaseSince)}${status ? ` · ${status}` : ''}`, cls: '', mark: ['working', 'ok'] };
    }
    if (phase === 'cut') return { text: `turn cut at the time box ${ago(p.phaseSince)} ago`, cls: '', mark: ['cut', 'warn'] };
    return { text: `idle${p.phaseSince ? ` for ${ago(p.phaseSince)}` : ''}${status && status !== 'idle' ? ` · ${status}` : ''}`, cls: '', mark: ['idle', 'ok'] };
  }
  function projectPeers() {
    return S.peers.filter((p) => p.project === S.project || (p.session || '').endsWith(`:${S.project}`));
  }
  function renderSeats() {
    const list = $('seats');
    const peers = projectPeers();
    const frag = document.createDocumentFragment();
    for (const p of peers) {
      const st = seatState(p);
      const li = el('li', { class: `seat ${st.cls}`, 'data-session': p.session, 'data-state': st.mark[0] },
        el('div', { class: 'name' }, p.session, ' ', el('span', { class: `mark ${st.mark[1]}`, text: st.mark[0] })),
        el('div', { class: 'state', text: st.text }),
        el('div', { class: 'sub', text: [p.agent || p.llm, p.model, p.persona ? `persona ${p.persona}` : '', p.kind].filter(Boolean).join(' · ') || 'not a runner seat' }),
        S.costs.seat.has(p.session) ? el('div', { class: 'sub cost', text: `cost ${costLine(S.costs.seat.get(p.session))}` }) : null,
        p.status && !st.text.includes(p.status) ? el('div', { class: 'sub', text: `status: ${p.status}` }) : null);
      li.hidden = !matchesSearch(p.session, p.status, p.persona, p.agent, p.model);
      frag.append(li);
    }
    if (!peers.length) frag.append(el('li', { class: 'hint', text: `no seats in ${S.project || 'this project'} (start some: trantor up)` }));
    list.replaceChildren(frag);
    // Keep the pickers of the forms in step with the roster.
    for (const [id, first] of [['msg-to', ['all', 'all']], ['new-assignee', ['', '(unassigned)']], ['tl-seat', ['', 'any']]]) {
      const s = $(id);
      const keep = s.value;
      const names = new Set(peers.map((p) => p.session));
      if (id === 'tl-seat') for (const e of S.events) if (e.by) names.add(e.by);
      const key = [...names].sort().join('\n');
      if (s.dataset.key === key) continue; // unchanged: leave a picker alone while it is in use
      s.dataset.key = key;
      s.replaceChildren(el('option', { value: first[0], text: first[1] }),
        ...[...names].sort().map((n) => el('option', { value: n, text: n })));
      s.value = [...s.options].some((o) => o.value === keep) ? keep : first[0];
    }
  }
  async function loadPeers() {
    const r = await getJson('/peers');
    S.peers = r.peers || [];
    for (const p of S.peers) if (p.project) S.projects.add(p.project);
    renderSeats();
    renderProjects();
  }

  // ---------- flow ----------
  async function loadFlow() {
    const r = await getJson('/recent?limit=200');
    S.messages = (r.messages || []).filter((m) => m.project === S.project && m.to !== 'all').sort((a, b) => a.id - b.id);
    const senders = [...new Set(S.messages.map((m) => m.from))].slice(0, 40);
    const ledgers = await Promise.all(senders.map((s) =>
      getJson(`/contracts?session=${q(s)}&project=${q(S.project)}`).catch(() => null)));
    S.contracts.clear();
    for (const l of ledgers) {
      if (!l) continue;
      for (const key of ['contracts', 'abandonedContracts', 'supersededContracts', 'ackContracts']) {
        for (const c of l[key] || []) S.contracts.set(c.id, c);
      }
    }
    await loadDelivery();
    renderFlow();
  }
  // Each contract's current delivery state (docs/protocol.md §5.8): one open-list read per
  // recipient; a contract no longer open is read once by id, and kept once it is terminal
  // (consumed and failed never change). A hub without the record leaves the marks off.
  const TERMINAL = new Set(['consumed', 'failed']);
  async function loadDelivery() {
    const contracts = S.messages.filter((m) => S.contracts.has(m.id));
    const recipients = [...new Set(contracts.map((m) => m.to))].slice(0, 40);
    const open = new Map();
    const lists = await Promise.all(recipients.map((r) =>
      getJson(`/delivery?session=${q(r)}&open=1&limit=1000`).catch(() => null)));
    if (lists.every((l) => l === null) && recipients.length) return;
    for (const l of lists) for (const o of (l && l.open) || []) open.set(o.id, o);
    const lookups = [];
    for (const m of contracts) {
      if (open.has(m.id)) { S.delivery.set(m.id, open.get(m.id)); continue; }
      const known = S.delivery.get(m.id);
      if (known && TERMINAL.has(known.state)) continue;
      if (lookups.length < 50) lookups.push(m.id);
    }
    const recs = await Promise.all(lookups.map((id) => getJson(`/delivery?id=${id}`).catch(() => null)));
    for (const r of recs) {
      const last = r && r.states && r.states[r.states.length - 1];
      if (last) S.delivery.set(r.id, last);
    }
  }
  function deliveryMark(d) {
    const cls = d.state === 'consumed' ? 'ok' : d.state === 'failed' ? 'bad'
      : d.state === 'requeued' || d.state === 'parked' ? 'warn' : 'info';
    const bits = [d.turn != null ? `turn ${d.turn}` : '', d.instance ? `by ${d.instance}` : '',
      d.outcome || '', d.reason || ''].filter(Boolean);
    return el('span', { class: `mark delivery ${cls}`, 'data-delivery': d.state,
      title: bits.join(' · ') || d.state, text: `delivery: ${d.state}` });
  }
  function renderFlow() {
    const delivered = new Map(S.peers.map((p) => [p.session, p.deliveredUpTo || 0]));
    const lanes = new Map();
    for (const m of S.messages) {
      if (!matchesSearch(m.from, m.to, m.text, m.kind)) continue;
      if (!lanes.has(m.from)) lanes.set(m.from, []);
      lanes.get(m.from).push(m);
    }
    const frag = document.createDocumentFragment();
    for (const [from, msgs] of lanes) {
      const ol = el('ol', { 'aria-label': `messages from ${from}` });
      for (const m of msgs) {
        const c = S.contracts.get(m.id);
        const kind = m.kind === 'receipt' ? 'receipt' : m.re ? 'reply' : c ? 'contract' : (m.kind || 'message');
        const marks = [];
        if ((delivered.get(m.to) || 0) < m.id) marks.push(['undelivered', 'undelivered']);
        if (c && (c.disposition === 'stalled' || c.disposition === 'abandoned')) marks.push(['overdue', `overdue (${c.disposition})`]);
        if (c && c.disposition === 'answered') marks.push(['ok', 'answered']);
        const d = c ? S.delivery.get(m.id) : null;
        ol.append(el('li', { class: `msg ${kind}`, 'data-id': m.id, tabindex: 0 },
          el('div', null, el('span', { class: 'to', text: `→ ${m.to}` }), ` · ${kind} · ${clock(m.ts)}${m.re ? ` · re ${m.re}` : ''}`),
          el('div', { class: 'tx', text: m.text }),
          marks.length || d ? el('div', null, ...marks.map(([cls, t]) => el('span', { class: `mark ${cls}`, text: t })),
            d ? deliveryMark(d) : null) : null));
      }
      frag.append(el('section', { class: 'lane', 'data-from': from }, el('h3', { text: from }), ol));
    }
    if (!lanes.size) frag.append(el('p', { class: 'hint', text: 'no direct messages in this project yet' }));
    $('flow').replaceChildren(frag);
  }

  // ---------- timeline ----------
  function eventText(e) {
    if (e.type === 'message') return `→ ${e.toSession}: ${e.text || ''}`;
    if (CARD_EVENTS.has(e.type)) {
      const move = e.from || e.to ? ` ${e.from || ''}${e.from ? ' → ' : ''}${e.to || ''}` : '';
      return `#${e.taskId} ${e.title || ''}${move}${e.note ? ` — ${e.note}` : ''}`;
    }
    if (e.type === 'contract.abandoned') return `contract ${e.msgId} ${e.fromSession} → ${e.toSession} abandoned (${e.reason})`;
    return e.text || e.session || '';
  }
  function renderTimeline() {
    const seat = $('tl-seat').value;
    const card = Number(($('tl-card').value || '').replace('#', '')) || 0;
    const kind = $('tl-kind').value;
    const rows = [];
    for (let i = S.events.length - 1; i >= 0 && rows.length < 500; i--) {
      const e = S.events[i];
      if (seat && e.by !== seat && e.toSession !== seat) continue;
      if (card && e.taskId !== card && !(e.refs || []).includes(card)) continue;
      if (kind && e.type !== kind) continue;
      const text = eventText(e);
      if (!matchesSearch(e.by, e.type, text)) continue;
      rows.push(el('li', { 'data-id': e.id, 'data-type': e.type },
        el('span', { text: clock(e.ts) }), el('span', { class: 'k', text: e.type }),
        el('span', { text: e.by }), el('span', { class: 'x', text: text })));
    }
    $('timeline').replaceChildren(...rows);
    const kinds = new Set(S.events.map((e) => e.type));
    const ks = $('tl-kind');
    if (ks.options.length - 1 !== kinds.size) {
      const keep = ks.value;
      ks.replaceChildren(el('option', { value: '', text: 'any' }), ...[...kinds].sort().map((k) => el('option', { value: k, text: k })));
      ks.value = keep;
    }
  }

  // ---------- live: events ----------
  const rerender = {
    timeline: debounce(() => { if (S.view === 'timeline') renderTimeline(); }, 150),
    flow: debounce(() => { if (S.view === 'flow') loadFlow().catch(showError); }, 400),
    seats: debounce(() => loadPeers().catch(showError), 300),
    // A turn ends with the seat's presence and messages: the ledger has moved by then.
    cost: debounce(async () => {
      try {
        await loadCosts();
        for (const [id, c] of S.cards) if (S.costs.card.has(id)) patchCard(c);
        if (S.view === 'cost') renderCost();
        if (S.view === 'seats') renderSeats();
      } catch (e) { showError(e); }
    }, 1500),
  };
  function applyEvent(e) {
    if (S.seen.has(e.id)) return; // a replay after a reconnect: already shown
    S.seen.add(e.id);
    if (e.project) S.projects.add(e.project);
    if (e.project !== S.project && !(e.type || '').startsWith('presence.')) return;
    const t0 = performance.now();
    if (e.project === S.project) {
      // Keep the list sorted by id: a catch-up may deliver older events after newer ones.
      if (!S.events.length || S.events[S.events.length - 1].id < e.id) S.events.push(e);
      else {
        let i = S.events.length;
        while (i > 0 && S.events[i - 1].id > e.id) i--;
        S.events.splice(i, 0, e);
      }
      if (S.events.length > TIMELINE_MAX) S.events.splice(0, S.events.length - TIMELINE_MAX);
      stats.events = S.events.length;
      $('timeline').dataset.count = String(S.events.length);
    }
    if (CARD_EVENTS.has(e.type) && e.project === S.project) onCardEvent(e);
    if (e.type === 'message') { rerender.flow(); }
    if ((e.type || '').startsWith('presence.') || e.type === 'message') rerender.seats();
    if (e.project === S.project && (e.type === 'message' || CARD_EVENTS.has(e.type))) rerender.cost();
    rerender.timeline();
    stats.lastApplyMs = performance.now() - t0;
  }
  // Fetch what the stream may have missed (after a reconnect, or a gap in ids) and apply it.
  function catchUp() {
    if (S.catching) return S.catching;
    S.catching = (async () => {
      try {
        const since = S.cursor;
        const r = await getJson(`/events?since=${since}&limit=${CATCHUP_LIMIT}`);
        const evs = r.events || [];
        if (evs.length === CATCHUP_LIMIT && evs[0].id > since + 1) {
          await loadAll(); // too far behind to replay: start over from a fresh snapshot
          return;
        }
        for (const e of evs) applyEvent(e);
        S.cursor = Math.max(S.cursor, r.latest || 0, ...evs.map((e) => e.id));
      } catch (e) {
        showError(e);
      } finally {
        S.catching = null;
      }
    })();
    return S.catching;
  }
  function setConn(state, text) {
    const c = $('conn');
    c.dataset.state = state;
    c.textContent = text;
  }
  let retry = 0;
  function connect() {
    if (S.es) S.es.close();
    const es = new EventSource('/stream?events=1');
    S.es = es;
    es.addEventListener('open', () => {
      retry = 0;
      setConn('live', 'live');
      stats.opens++;
      catchUp();
      loadPeers().catch(showError);
    });
    es.addEventListener('ev', (m) => {
      let e;
      try { e = JSON.parse(m.data); } catch { return; }
      if (S.catching || e.id > S.cursor + 1) {
        // A gap (or a catch-up in flight): replay from the cursor, which includes this event.
        catchUp().then(() => { applyEvent(e); S.cursor = Math.max(S.cursor, e.id); });
        return;
      }
      applyEvent(e);
      S.cursor = Math.max(S.cursor, e.id);
    });
    es.addEventListener('error', () => {
      setConn('down', 'reconnecting…');
      if (es.readyState === EventSource.CLOSED) {
        retry = Math.min(retry + 1, 6);
        setTimeout(connect, 500 * 2 ** retry);
      }
    });
  }

  // ---------- loading ----------
  function showError(e) { notice(`hub: ${e.message || e}`); }
  function renderProjects() {
    const sel = $('project');
    if (S.project) S.projects.add(S.project);
    const list = [...S.projects].sort();
    if (sel.options.length === list.length && [...sel.options].every((o, i) => o.value === list[i])) return;
    sel.replaceChildren(...list.map((p) => el('option', { value: p, selected: p === S.project, text: p })));
  }
  async function loadAll() {
    const t0 = performance.now();
    // The event log first: its `latest` is the cursor the live stream continues from.
    const [evs, peers] = await Promise.all([
      getJson(`/events?limit=2000${S.project ? `&project=${q(S.project)}` : ''}`),
      getJson('/peers'),
    ]);
    S.peers = peers.peers || [];
    for (const p of S.peers) if (p.project) S.projects.add(p.project);
    for (const e of evs.events || []) if (e.project) S.projects.add(e.project);
    if (!S.project) {
      // No project chosen: the one with the most recent activity.
      const last = (evs.events || []).slice().reverse().find((e) => e.project);
      S.project = (last && last.project) || (S.peers[0] && S.peers[0].project) || '';
      if (S.project) return loadAll();
    }
    if (!S.me) S.me = `human:${S.project || 'trantor'}`;
    $('me').value = S.me;
    S.events = [];
    S.seen.clear();
    S.cursor = evs.latest || 0;
    for (const e of evs.events || []) { S.seen.add(e.id); S.events.push(e); }
    renderProjects();
    await loadBoard();
    renderSeats();
    if (S.view === 'flow') await loadFlow();
    renderTimeline();
    stats.loadMs = performance.now() - t0;
    document.body.dataset.ready = '1';
  }

  // ---------- views, keyboard ----------
  const VIEWS = ['board', 'seats', 'flow', 'timeline', 'cost'];
  function show(view, focus) {
    if (!VIEWS.includes(view)) view = 'board';
    S.view = view;
    for (const v of VIEWS) {
      const tab = $(`tab-${v}`);
      tab.setAttribute('aria-selected', String(v === view));
      tab.tabIndex = v === view ? 0 : -1;
      $(`view-${v}`).hidden = v !== view;
    }
    if (focus) $(`tab-${view}`).focus();
    if (location.hash !== `#${view}`) history.replaceState(null, '', `${location.search}#${view}`);
    if (view === 'flow') loadFlow().catch(showError);
    if (view === 'timeline') renderTimeline();
    if (view === 'seats') renderSeats();
    if (view === 'cost') loadCosts().then(renderCost).catch(showError);
  }
  function wire() {
    for (const v of VIEWS) $(`tab-${v}`).addEventListener('click', () => show(v));
    $('tab-board').parentElement.addEventListener('keydown', (ev) => {
      const i = VIEWS.indexOf(S.view);
      if (ev.key === 'ArrowRight') show(VIEWS[(i + 1) % VIEWS.length], true);
      else if (ev.key === 'ArrowLeft') show(VIEWS[(i + VIEWS.length - 1) % VIEWS.length], true);
      else if (ev.key === 'Home') show(VIEWS[0], true);
      else if (ev.key === 'End') show(VIEWS[VIEWS.length - 1], true);
      else return;
      ev.preventDefault();
    });
    document.addEventListener('keydown', (ev) => {
      const typing = /^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName);
      if (ev.key === '/' && !typing) { ev.preventDefault(); $('search').focus(); }
    });
    const board = $('board');
    board.addEventListener('click', (ev) => {
      if (ev.target.closest('select')) return;
      const li = ev.target.closest('li.card');
      if (li) openCard(Number(li.dataset.id));
    });
    board.addEventListener('keydown', (ev) => {
      const li = ev.target.closest('li.card');
      if (!li || ev.target !== li) return;
      if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); openCard(Number(li.dataset.id)); }
      if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
        ev.preventDefault();
        let n = ev.key === 'ArrowDown' ? li.nextElementSibling : li.previousElementSibling;
        while (n && n.hidden) n = ev.key === 'ArrowDown' ? n.nextElementSibling : n.previousElementSibling;
        if (n) n.focus();
      }
    });
    board.addEventListener('change', (ev) => {
      const sel = ev.target.closest('select[data-move]');
      if (sel) moveCard(Number(sel.dataset.move), sel.value);
    });
    $('add-card').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const title = $('new-title').value.trim();
      if (!title) return;
      const body = { title, project: S.project, by: S.me, status: 'todo' };
      const a = $('new-assignee').value;
      if (a) body.assignee = a;
      try {
        const r = await postJson('/task', body);
        $('new-title').value = '';
        notice(`card #${r.id ?? (r.task && r.task.id) ?? ''} added`, 'info');
      } catch (e) {
        notice(`card not added: ${e.message}`);
      }
    });
    $('post-msg').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const text = $('msg-text').value.trim();
      if (!text) return;
      try {
        const r = await postJson('/send', { from: S.me, to: $('msg-to').value, text, project: S.project });
        $('msg-text').value = '';
        notice(`message ${r.id} sent to ${$('msg-to').value}`, 'info');
      } catch (e) {
        notice(`message not sent: ${e.message}`);
      }
    });
    $('project').addEventListener('change', () => {
      S.project = $('project').value;
      localStorage.setItem('trantor.project', S.project);
      const u = new URLSearchParams(location.search);
      u.set('project', S.project);
      history.replaceState(null, '', `?${u}#${S.view}`);
      loadAll().catch(showError);
    });
    $('me').addEventListener('change', () => {
      S.me = $('me').value.trim() || S.me;
      localStorage.setItem('trantor.me', S.me);
    });
    $('search').addEventListener('input', debounce(() => {
      const t0 = performance.now();
      S.search = $('search').value.trim().toLowerCase();
      for (const [id, n] of S.cardEls) {
        const c = S.cards.get(id);
        n.hidden = !matchesSearch(`#${c.id}`, c.title, c.assignee, c.drill);
      }
      updateCounts();
      renderSeats();
      if (S.view === 'flow') renderFlow();
      if (S.view === 'timeline') renderTimeline();
      stats.searchMs = performance.now() - t0;
    }, 120));
    for (const id of ['tl-seat', 'tl-kind']) $(id).addEventListener('change', renderTimeline);
    const cardFilter = debounce(renderTimeline, 150);
    $('tl-card').addEventListener('input', cardFilter);
    $('tl-card').addEventListener('change', cardFilter);
    $('tl-filter').addEventListener('submit', (ev) => ev.preventDefault());
    // Ages and seat states drift with the clock; peers change phase without an event.
    setInterval(() => { if (S.view === 'seats' || S.view === 'board') loadPeers().catch(() => {}); }, 3000);
    window.addEventListener('hashchange', () => show(location.hash.slice(1)));
  }

  wire();
  show(location.hash.slice(1) || 'board');
  loadAll().then(connect).catch((e) => { showError(e); setConn('down', 'hub unreachable'); setTimeout(() => location.reload(), 5000); });
})();
