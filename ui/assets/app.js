// The outbox dashboard. Vanilla ES2020, no dependencies. Every piece of
// data from the server is inserted with textContent: payloads, keys and
// errors are untrusted. The HTTP API is described in ui/doc.go.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = 'http://www.w3.org/2000/svg';
  const REFRESH_MS = 5000;
  const PAGE_SIZE = 50;

  const S = {
    page: '', ov: null, skew: 0, ro: true,
    filter: {}, after: '', stack: [], next: null,
    entry: null, seq: {},
  };

  // ---- helpers ----------------------------------------------------------

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text != null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function cookie(name) {
    for (const part of document.cookie.split(';')) {
      const i = part.indexOf('=');
      if (i > 0 && part.slice(0, i).trim() === name) {
        try { return decodeURIComponent(part.slice(i + 1).trim()); } catch { return part.slice(i + 1).trim(); }
      }
    }
    return '';
  }

  // api GETs path, or POSTs body as JSON when body is given. It resolves to
  // the decoded JSON and rejects with an Error carrying the server's
  // {"error"} text and the status.
  async function api(path, body) {
    const opt = { credentials: 'same-origin', headers: { Accept: 'application/json' }, cache: 'no-store' };
    if (body !== undefined) {
      opt.method = 'POST';
      opt.headers['Content-Type'] = 'application/json';
      opt.headers['X-Outbox-CSRF'] = cookie('outbox_csrf');
      opt.body = JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch(path, opt);
    } catch (e) {
      throw new Error('cannot reach the dashboard server (' + (e && e.message || e) + ')');
    }
    const txt = await r.text();
    let data = null;
    try { data = txt ? JSON.parse(txt) : null; } catch { data = undefined; }
    if (!r.ok) {
      const msg = data && typeof data.error === 'string' ? data.error
        : (r.status + ' ' + (r.statusText || '') + (data === undefined && txt ? ': ' + txt.slice(0, 200) : '')).trim();
      const err = new Error(msg);
      err.status = r.status;
      throw err;
    }
    if (data === undefined) throw new Error(path + ': the answer is not JSON');
    return data;
  }

  // next returns a token for a load of kind; fresh(kind, token) tells
  // whether it is still the latest, so a slow answer never paints over a
  // newer one.
  function next(kind) { S.seq[kind] = (S.seq[kind] || 0) + 1; return S.seq[kind]; }
  function fresh(kind, t) { return S.seq[kind] === t; }

  const fmtNum = (n) => (n == null || isNaN(n) ? '–' : Number(n).toLocaleString('en-US'));
  const fmtLag = (s) => (s == null || isNaN(s) ? '–' : Number(s).toFixed(1) + ' s');
  const plural = (n, one, many) => n + ' ' + (n === 1 ? one : many);

  function fmtDur(sec) {
    const a = Math.abs(sec);
    if (a < 60) return Math.round(a) + ' s';
    if (a < 3600) return Math.round(a / 60) + ' min';
    if (a < 86400) return (a / 3600).toFixed(1) + ' h';
    return (a / 86400).toFixed(1) + ' d';
  }

  const serverNow = () => Date.now() + S.skew;

  // fmtRel says when t is relative to the server's now: "in 8 s", "3 min ago".
  function fmtRel(t) {
    if (!t) return '–';
    const ms = Date.parse(t);
    if (isNaN(ms)) return String(t);
    const d = (ms - serverNow()) / 1000;
    return d >= 0 ? 'in ' + fmtDur(d) : fmtDur(d) + ' ago';
  }

  // fmtTime shows an RFC 3339 time in UTC, to the second.
  function fmtTime(t) {
    if (!t) return '–';
    const ms = Date.parse(t);
    if (isNaN(ms)) return String(t);
    return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }

  function setStatus(msg) {
    const s = $('status');
    s.textContent = msg || '';
    s.hidden = !msg;
  }

  function toast(msg, ok) {
    const t = $('toast');
    t.textContent = msg;
    t.className = 'toast ' + (ok ? 'ok' : 'err');
    t.hidden = false;
  }

  // counts reads COUNTS from an object that has them inline or nested.
  const counts = (o) => (o && (o.stats || o.counts)) || o || {};

  // ---- confirmation -----------------------------------------------------

  let confirmDone = null;
  function confirmAction(msg, yesLabel) {
    if (confirmDone) confirmDone(false);
    $('confirm-message').textContent = msg;
    $('confirm-yes').textContent = yesLabel || 'Yes';
    $('confirm-dialog').hidden = false;
    $('confirm-no').focus();
    return new Promise((resolve) => { confirmDone = resolve; });
  }
  function closeConfirm(answer) {
    $('confirm-dialog').hidden = true;
    const done = confirmDone;
    confirmDone = null;
    if (done) done(answer);
  }

  // act confirms, posts, reports in the toast and then calls after.
  async function act(kind, body, msg, scope, after) {
    if (S.ro) return;
    const label = kind === 'requeue' ? 'Requeue' : 'Cancel';
    if (!(await confirmAction(msg, 'Yes, ' + label.toLowerCase()))) return;
    try {
      const r = (await api('/api/' + kind, body)) || {};
      let text;
      if (kind === 'requeue') {
        text = 'requeued ' + plural(r.requeued || 0, 'entry', 'entries') + scope;
        const refused = r.refused || [];
        if (refused.length) {
          text += '; refused: ' + refused.slice(0, 5).map((f) => f.id + ': ' + f.reason).join('; ');
          if (refused.length > 5) text += ' (and ' + (refused.length - 5) + ' more)';
        }
        if (r.more) text += '; more entries match: run it again';
        toast(text, !refused.length);
      } else {
        toast('cancelled ' + plural(r.cancelled || 0, 'entry', 'entries') + scope +
          (r.more ? '; more entries match: run it again' : ''), true);
      }
    } catch (e) {
      toast(kind + ' failed: ' + e.message, false);
    }
    loadOverview();
    if (after) after();
  }

  // ---- top bar and read-only ------------------------------------------

  function setReadOnly(ro) {
    S.ro = ro;
    document.body.classList.toggle('ro', ro);
    for (const b of document.querySelectorAll('.action')) b.hidden = ro;
    $('badge-readonly').hidden = !ro;
  }

  function paintTop(ov) {
    $('store').textContent = ov.store || '';
    $('store').title = ov.kind ? 'store (' + ov.kind + ')' : 'store';
    $('outbox-name').textContent = ov.outbox ? 'outbox ' + ov.outbox : '';
    const held = ov.held && ov.held.held;
    const hb = $('badge-held');
    hb.hidden = !held;
    hb.textContent = held ? 'held: ' + (ov.held.reason || 'no reason given') : '';
    hb.title = held && ov.held.since ? 'since ' + fmtTime(ov.held.since) : '';
    $('badge-sealed').hidden = !ov.sealed;
    document.title = 'outbox' + (ov.outbox ? ' ' + ov.outbox : '') + (ov.store ? ' · ' + ov.store : '');
  }

  // ---- overview -------------------------------------------------------

  function chart(svg, samples, field) {
    const W = 300, H = 60, pad = 3;
    const pts = [];
    for (const s of samples) {
      const v = Number(counts(s)[field]);
      const t = Date.parse(s.t);
      if (!isNaN(v)) pts.push([isNaN(t) ? pts.length : t, v]);
    }
    svg.replaceChildren();
    if (pts.length < 2) {
      const tx = document.createElementNS(SVG, 'text');
      tx.setAttribute('x', W / 2); tx.setAttribute('y', H / 2 + 4);
      tx.setAttribute('text-anchor', 'middle'); tx.setAttribute('class', 'empty');
      tx.textContent = 'collecting samples…';
      svg.append(tx);
      return;
    }
    const x0 = pts[0][0], x1 = pts[pts.length - 1][0] || x0 + 1;
    let max = 0;
    for (const p of pts) max = Math.max(max, p[1]);
    const top = max > 0 ? max : 1;
    const xy = pts.map(([x, v]) => [
      ((x - x0) / (x1 - x0 || 1)) * W,
      H - pad - (v / top) * (H - 2 * pad),
    ]);
    const line = xy.map(([x, y]) => x.toFixed(1) + ',' + y.toFixed(1)).join(' ');
    const area = document.createElementNS(SVG, 'polygon');
    area.setAttribute('points', '0,' + H + ' ' + line + ' ' + W + ',' + H);
    area.setAttribute('class', 'area');
    const pl = document.createElementNS(SVG, 'polyline');
    pl.setAttribute('points', line);
    pl.setAttribute('class', 'line');
    pl.setAttribute('vector-effect', 'non-scaling-stroke');
    const title = document.createElementNS(SVG, 'title');
    const show = field === 'lag_seconds' ? fmtLag : fmtNum;
    title.textContent = 'last ' + fmtDur((x1 - x0) / 1000) + ': max ' + show(max) + ', now ' + show(pts[pts.length - 1][1]);
    svg.append(title, area, pl);
  }

  async function loadOverview() {
    const t = next('ov');
    let ov;
    try {
      ov = await api('/api/overview');
    } catch (e) {
      if (fresh('ov', t)) setStatus('overview: ' + e.message);
      return;
    }
    if (!fresh('ov', t) || !ov) return;
    setStatus('');
    S.ov = ov;
    const now = Date.parse(ov.now);
    S.skew = isNaN(now) ? 0 : now - Date.now();
    setReadOnly(!!ov.read_only);
    paintTop(ov);
    const st = counts(ov);
    $('overview-pending').textContent = fmtNum(st.pending);
    $('overview-due').textContent = fmtNum(st.due);
    $('overview-parked').textContent = fmtNum(st.parked);
    $('overview-lag').textContent = fmtLag(st.lag_seconds);
    const samples = ov.samples || [];
    chart($('chart-pending'), samples, 'pending');
    chart($('chart-due'), samples, 'due');
    chart($('chart-parked'), samples, 'parked');
    chart($('chart-lag'), samples, 'lag_seconds');
    const meta = [];
    if (ov.partitions != null) meta.push(plural(ov.partitions, 'partition', 'partitions'));
    if (st.oldest_due) meta.push('oldest due ' + fmtTime(st.oldest_due));
    if (ov.sample_interval_seconds) meta.push('sampled every ' + ov.sample_interval_seconds + ' s');
    meta.push('updated ' + fmtTime(ov.now || new Date().toISOString()));
    $('overview-meta').textContent = meta.join(' · ');
  }

  // ---- partitions -----------------------------------------------------

  async function loadPartitions() {
    const t = next('parts');
    let r;
    try {
      r = await api('/api/partitions');
    } catch (e) {
      if (fresh('parts', t)) setStatus('partitions: ' + e.message);
      return;
    }
    if (!fresh('parts', t)) return;
    setStatus('');
    const parts = (r && r.partitions) || [];
    const body = $('partitions-table').tBodies[0];
    const rows = [];
    // The lagging rows: up to three with the highest positive lag.
    const lagging = new Set(parts
      .filter((p) => Number(counts(p).lag_seconds) > 0)
      .sort((a, b) => counts(b).lag_seconds - counts(a).lag_seconds)
      .slice(0, Math.min(3, Math.max(1, Math.ceil(parts.length / 4))))
      .map((p) => p.partition));
    for (const p of parts) {
      const c = counts(p);
      const tr = document.createElement('tr');
      tr.dataset.partition = p.partition;
      const stranded = !p.lease && Number(c.pending) > 0;
      if (stranded) { tr.classList.add('stranded'); tr.title = 'no relay holds this partition while entries are pending'; }
      if (lagging.has(p.partition)) tr.classList.add('lagging');
      tr.append(
        el('td', p.partition),
        el('td', fmtNum(c.pending), 'n'),
        el('td', fmtNum(c.due), 'n'),
        el('td', fmtNum(c.parked), 'n'),
        el('td', fmtLag(c.lag_seconds), 'n'),
        el('td', p.lease ? p.lease.owner : (stranded ? 'none' : '–'), p.lease ? '' : 'muted'),
        el('td', p.lease ? fmtRel(p.lease.expires) : '–'),
      );
      if (p.lease && p.lease.expires) tr.lastChild.title = fmtTime(p.lease.expires) + (p.lease.version != null ? ' (version ' + p.lease.version + ')' : '');
      rows.push(tr);
    }
    if (!rows.length) {
      const tr = document.createElement('tr');
      const td = el('td', 'no partitions', 'muted');
      td.colSpan = 7;
      tr.append(td);
      rows.push(tr);
    }
    body.replaceChildren(...rows);
  }

  // ---- parked ---------------------------------------------------------

  const FILTERS = ['topic', 'key', 'error', 'since', 'until'];

  // readFilter reads the inputs into a FILTER, leaving out empty fields.
  // The server reads the times (RFC 3339, a UTC date and time, or a
  // duration ago such as 90m or 7d) and reports what it cannot read.
  function readFilter() {
    const f = {};
    for (const k of FILTERS) {
      const v = $('filter-' + k).value;
      const got = k === 'since' || k === 'until' ? v.trim() : v;
      if (got !== '') f[k] = got;
    }
    return f;
  }

  function describe(f) {
    const parts = [];
    if (f.topic != null) parts.push('topic "' + f.topic + '"');
    if (f.key != null) parts.push('key "' + f.key + '"');
    if (f.error != null) parts.push('error containing "' + f.error + '"');
    if (f.since) parts.push('created since ' + f.since);
    if (f.until) parts.push('created until ' + f.until);
    return parts.length ? 'parked entries with ' + parts.join(', ') : 'ALL parked entries (no filter)';
  }

  // applyFilter takes the inputs as the filter and goes to the first page.
  function applyFilter() {
    S.filter = readFilter();
    S.after = '';
    S.stack = [];
    return true;
  }

  async function loadParked() {
    const t = next('parked');
    const q = new URLSearchParams();
    for (const k of FILTERS) if (S.filter[k] != null) q.set(k, S.filter[k]);
    if (S.after) q.set('after', S.after);
    q.set('limit', String(PAGE_SIZE));
    let r;
    try {
      r = await api('/api/parked?' + q.toString());
    } catch (e) {
      if (fresh('parked', t)) setStatus('parked entries: ' + e.message);
      return;
    }
    if (!fresh('parked', t)) return;
    setStatus('');
    const entries = (r && r.entries) || [];
    const rows = entries.map((e) => {
      const tr = document.createElement('tr');
      tr.dataset.id = e.id;
      tr.tabIndex = 0;
      const err = e.last_error || '';
      const errTd = el('td', null, 'err-cell');
      errTd.append(el('div', err.length > 200 ? err.slice(0, 200) + '…' : err, 'clamp'));
      errTd.title = err;
      const created = el('td', fmtTime(e.created_at), 'nowrap');
      created.title = 'ID ' + e.id;
      tr.append(
        created,
        el('td', e.topic),
        el('td', e.key),
        el('td', fmtNum(e.attempts), 'n'),
        errTd,
        el('td', fmtNum(e.payload_bytes), 'n'),
      );
      return tr;
    });
    if (!rows.length) {
      const tr = document.createElement('tr');
      const td = el('td', S.after ? 'no more parked entries' : 'no parked entries' + (Object.keys(S.filter).length ? ' match the filter' : ''), 'muted');
      td.colSpan = 6;
      tr.append(td);
      rows.push(tr);
    }
    $('parked-table').tBodies[0].replaceChildren(...rows);
    S.next = r && r.next_after != null && r.next_after !== '' ? String(r.next_after) : null;
    $('parked-next').disabled = !S.next;
    $('parked-prev').disabled = !S.stack.length;
    $('parked-page').textContent = 'page ' + (S.stack.length + 1) + ' · ' + plural(entries.length, 'entry', 'entries');
  }

  function openEntry(tr) {
    if (tr && tr.dataset.id) location.hash = '#/entry/' + encodeURIComponent(tr.dataset.id);
  }

  // ---- entry ----------------------------------------------------------

  const VIEWS = ['json', 'text', 'hex'];

  function showView(v) {
    for (const k of VIEWS) {
      $('payload-' + k).hidden = k !== v;
      const tab = $('view-' + k);
      tab.classList.toggle('active', k === v);
      tab.setAttribute('aria-selected', String(k === v));
    }
  }

  function headerRows(h) {
    let pairs = [];
    if (Array.isArray(h)) {
      pairs = h.map((x) => (Array.isArray(x) ? x : [x.key ?? x.name, x.value]));
    } else if (h && typeof h === 'object') {
      pairs = Object.entries(h);
    }
    return pairs.map(([k, v]) => {
      const tr = document.createElement('tr');
      tr.append(el('th', k), el('td', typeof v === 'string' ? v : JSON.stringify(v)));
      return tr;
    });
  }

  async function loadEntry(id) {
    const t = next('entry');
    $('entry-id').textContent = '';
    let e;
    try {
      e = await api('/api/entries/' + encodeURIComponent(id));
    } catch (err) {
      if (!fresh('entry', t)) return;
      S.entry = null;
      $('entry-body').hidden = true;
      const m = $('entry-missing');
      m.textContent = err.status === 404 ? err.message : 'entry ' + id + ': ' + err.message;
      m.hidden = false;
      return;
    }
    if (!fresh('entry', t) || !e) return;
    S.entry = e;
    $('entry-missing').hidden = true;
    $('entry-body').hidden = false;
    $('entry-id').textContent = e.id;
    const st = $('entry-state');
    st.textContent = e.state || '';
    st.className = 'badge ' + (e.state === 'parked' ? 'warn' : 'ok');
    $('entry-attempts').textContent = fmtNum(e.attempts);
    $('entry-topic').textContent = e.topic ?? '';
    $('entry-key').textContent = e.key ?? '';
    $('entry-partition').textContent = e.partition ?? '';
    $('entry-created').textContent = fmtTime(e.created_at);
    $('entry-not-before').textContent = fmtTime(e.not_before);
    $('entry-due').textContent = e.due_at ? fmtTime(e.due_at) + ' (' + fmtRel(e.due_at) + ')' : '–';
    const p = e.payload || {};
    $('entry-bytes').textContent = fmtNum(p.bytes ?? e.payload_bytes);
    $('entry-last-error').textContent = e.last_error || '(none)';
    const hrows = headerRows(e.headers);
    if (!hrows.length) {
      const tr = document.createElement('tr');
      tr.append(el('td', '(none)', 'muted'));
      hrows.push(tr);
    }
    $('entry-headers').tBodies[0].replaceChildren(...hrows);
    let first = null;
    for (const k of VIEWS) {
      const v = p[k];
      const has = v != null;
      $('payload-' + k).textContent = has ? (typeof v === 'string' ? v : JSON.stringify(v, null, 2)) : '';
      $('view-' + k).disabled = !has;
      if (has && !first) first = k;
    }
    showView(first || 'hex');
  }

  // ---- routing --------------------------------------------------------

  function route() {
    const h = location.hash.replace(/^#\/?/, '');
    const slash = h.indexOf('/');
    const name = slash < 0 ? h : h.slice(0, slash);
    const page = ['overview', 'partitions', 'parked', 'entry'].includes(name) ? name : 'overview';
    S.page = page;
    for (const p of document.querySelectorAll('.page')) p.hidden = p.id !== 'page-' + page;
    const navPage = page === 'entry' ? 'parked' : page;
    for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.nav === navPage);
    setStatus('');
    if (page === 'overview') loadOverview();
    else if (page === 'partitions') loadPartitions();
    else if (page === 'parked') loadParked();
    else {
      let id = slash < 0 ? '' : h.slice(slash + 1);
      try { id = decodeURIComponent(id); } catch { /* keep it raw */ }
      loadEntry(id);
    }
  }

  function tick() {
    if (document.hidden) return;
    loadOverview(); // the numbers, and the top bar's badges on every page
    if (S.page === 'partitions') loadPartitions();
  }

  function init() {
    $('filters').addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (applyFilter()) loadParked();
    });
    $('parked-next').addEventListener('click', () => {
      if (!S.next) return;
      S.stack.push(S.after);
      S.after = S.next;
      loadParked();
    });
    $('parked-prev').addEventListener('click', () => {
      if (!S.stack.length) return;
      S.after = S.stack.pop();
      loadParked();
    });
    const tbody = $('parked-table').tBodies[0];
    tbody.addEventListener('click', (ev) => openEntry(ev.target.closest('tr')));
    tbody.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') openEntry(ev.target.closest('tr')); });

    const filtered = (kind) => () => {
      if (!applyFilter()) return;
      const f = S.filter;
      const verb = kind === 'requeue' ? 'Requeue' : 'Cancel (delete for good)';
      const scope = Object.keys(f).length ? ' (' + describe(f).replace(/^parked entries with /, 'matching ') + ')' : ' (all parked)';
      act(kind, { filter: f }, verb + ' ' + describe(f) + '?', scope, loadParked);
    };
    $('requeue-filtered').addEventListener('click', filtered('requeue'));
    $('cancel-filtered').addEventListener('click', filtered('cancel'));

    $('requeue-one').addEventListener('click', () => {
      const id = S.entry && S.entry.id;
      if (id) act('requeue', { ids: [id] }, 'Requeue entry ' + id + '? The relay delivers it again.', ' (' + id + ')', () => loadEntry(id));
    });
    $('cancel-one').addEventListener('click', () => {
      const id = S.entry && S.entry.id;
      if (id) act('cancel', { ids: [id] }, 'Cancel entry ' + id + '? It is deleted for good and never delivered.', ' (' + id + ')', () => { location.hash = '#/parked'; });
    });
    for (const k of VIEWS) $('view-' + k).addEventListener('click', () => showView(k));

    $('confirm-yes').addEventListener('click', () => closeConfirm(true));
    $('confirm-no').addEventListener('click', () => closeConfirm(false));
    $('confirm-dialog').addEventListener('click', (ev) => { if (ev.target === ev.currentTarget) closeConfirm(false); });
    document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape' && !$('confirm-dialog').hidden) closeConfirm(false); });
    $('toast').addEventListener('click', () => { $('toast').hidden = true; });

    window.addEventListener('hashchange', route);
    document.addEventListener('visibilitychange', () => { if (!document.hidden) tick(); });
    if (S.page === '' && !location.hash) history.replaceState(null, '', '#/overview');
    route();
    if (S.page !== 'overview') loadOverview();
    setInterval(tick, REFRESH_MS);
  }

  init();
})();
