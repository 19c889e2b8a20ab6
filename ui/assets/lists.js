// The listings: entries by state (#/entries/STATE, #/parked) and the
// blocked keys (#/blocked, #/blocked/PARTITION), with the shared filter
// form and paging.
import {
  $, el, link, api, next, fresh, fmtNum, fmtRel, fmtTime, plural, timeCell,
  setStatus, noteRow, loading,
} from './lib.js';

const PAGE_SIZE = 50;
export const STATES = ['due', 'scheduled', 'retrying', 'parked'];
const FILTERS = ['topic', 'key', 'error', 'since', 'until'];

// L is the state of the listings: the filter both share, and each one's
// paging (after: where the page starts; stack: the starts of the pages
// before; next: where the next page starts, null at the end).
const L = {
  filter: {},
  list: { state: 'parked', after: '', stack: [], next: null },
  blocked: { partition: null, after: '', stack: [], next: null },
};

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

export function describe(f) {
  const parts = [];
  if (f.topic != null) parts.push('topic "' + f.topic + '"');
  if (f.key != null) parts.push('key "' + f.key + '"');
  if (f.error != null) parts.push('error containing "' + f.error + '"');
  if (f.since) parts.push('created since ' + f.since);
  if (f.until) parts.push('created until ' + f.until);
  return parts.length ? 'parked entries with ' + parts.join(', ') : 'ALL parked entries (no filter)';
}

// applyFilter takes the inputs as the filter and goes back to the first
// page of both listings.
export function applyFilter() {
  L.filter = readFilter();
  for (const p of [L.list, L.blocked]) { p.after = ''; p.stack = []; }
  return L.filter;
}

function query(extra) {
  const q = new URLSearchParams();
  for (const k of FILTERS) if (L.filter[k] != null) q.set(k, L.filter[k]);
  for (const [k, v] of Object.entries(extra)) if (v != null && v !== '') q.set(k, String(v));
  return q.toString();
}

// errorCell shows an error in two lines, with a button that expands it to
// the whole text (fetched when the listing cut it).
function errorCell(e) {
  const err = e.last_error || '';
  const td = el('td', null, 'err-cell');
  const box = el('div', err, 'clamp');
  td.append(box);
  td.title = err;
  const cut = e.last_error_bytes > new TextEncoder().encode(err).length;
  if (cut || err.length > 80) { // about what two lines of the cell hold
    const b = el('button', 'more', 'more');
    b.type = 'button';
    b.title = cut ? 'show the whole error (' + fmtNum(e.last_error_bytes) + ' bytes)' : 'show the whole error';
    b.addEventListener('click', async (ev) => {
      ev.stopPropagation();
      if (td.classList.toggle('open')) {
        b.textContent = 'less';
        if (cut && !td.dataset.full) {
          try {
            const full = await api('/api/entries/' + encodeURIComponent(e.id) + '?payload=none');
            box.textContent = full.last_error || '';
            td.title = box.textContent;
            td.dataset.full = '1';
          } catch (x) {
            box.textContent = err + ' … (the rest could not be read: ' + x.message + ')';
          }
        }
      } else {
        b.textContent = 'more';
      }
    });
    td.append(b);
  }
  return td;
}

// dueCell says when an entry of state is due: how long it has been due,
// or when it will be.
function dueCell(e) {
  if (e.state === 'parked' || !e.due_at) return el('td', '–', 'muted');
  const td = timeCell(e.due_at);
  if (e.deferred) { td.textContent += ' (deferred)'; td.title += ' · deferred by an open circuit breaker'; }
  return td;
}

function idCell(id) {
  const td = el('td', null, 'id-cell');
  td.append(link('#/entry/' + encodeURIComponent(id), id));
  return td;
}

// ---- entries by state ---------------------------------------------------

export function showState(state) {
  if (L.list.state !== state) {
    L.list = { state, after: '', stack: [], next: null };
    $('entries-table').tBodies[0].dataset.loaded = ''; // not another state's rows while loading
  }
  for (const s of STATES) {
    const a = $('tab-' + s);
    a.classList.toggle('active', s === state);
    a.setAttribute('aria-selected', String(s === state));
  }
  // Requeue and cancel by filter act on parked entries only.
  $('filter-actions').hidden = state !== 'parked';
  return loadList();
}

const LIST_COLS = 9;

export async function loadList() {
  const t = next('list');
  const p = L.list;
  const body = $('entries-table').tBodies[0];
  loading(body, LIST_COLS);
  let r;
  try {
    r = await api('/api/entries?' + query({ state: p.state, after: p.after, limit: PAGE_SIZE }));
  } catch (e) {
    if (!fresh('list', t)) return;
    setStatus(p.state + ' entries: ' + e.message);
    noteRow(body, LIST_COLS, 'could not load the ' + p.state + ' entries: ' + e.message, 'bad');
    body.dataset.loaded = '';
    return;
  }
  if (!fresh('list', t)) return;
  setStatus('');
  const entries = (r && r.entries) || [];
  const rows = entries.map((e) => {
    const tr = document.createElement('tr');
    tr.dataset.id = e.id;
    tr.tabIndex = 0;
    const created = el('td', fmtTime(e.created_at), 'nowrap');
    tr.append(
      idCell(e.id), created, el('td', e.topic), el('td', e.key), el('td', e.partition, 'n'),
      el('td', fmtNum(e.attempts), 'n'), dueCell(e), errorCell(e), el('td', fmtNum(e.payload_bytes), 'n'),
    );
    return tr;
  });
  body.dataset.loaded = '1';
  if (rows.length) body.replaceChildren(...rows);
  else noteRow(body, LIST_COLS, p.after ? 'no more ' + p.state + ' entries' : 'no ' + p.state + ' entries' + (Object.keys(L.filter).length ? ' match the filter' : ''));
  p.next = r && r.next_after != null && r.next_after !== '' ? String(r.next_after) : null;
  $('list-next').disabled = !p.next;
  $('list-prev').disabled = !p.stack.length;
  $('list-page').textContent = 'page ' + (p.stack.length + 1) + ' · ' + plural(entries.length, 'entry', 'entries');
}

// ---- blocked keys -------------------------------------------------------

export function showBlocked(partition) {
  const b = L.blocked;
  if (b.partition !== partition) {
    L.blocked = { partition, after: '', stack: [], next: null };
    $('blocked-table').tBodies[0].dataset.loaded = '';
  }
  const scope = $('blocked-scope');
  scope.replaceChildren();
  if (partition != null) {
    scope.append('of partition ' + partition + ' · ', link('#/blocked', 'all partitions'));
  } else {
    scope.textContent = 'of every partition';
  }
  return loadBlocked();
}

const BLOCKED_COLS = 9;

export async function loadBlocked() {
  const t = next('blocked');
  const p = L.blocked;
  const body = $('blocked-table').tBodies[0];
  loading(body, BLOCKED_COLS);
  let r;
  try {
    r = await api('/api/blocked?' + query({ partition: p.partition, after: p.after, limit: PAGE_SIZE }));
  } catch (e) {
    if (!fresh('blocked', t)) return;
    setStatus('blocked keys: ' + e.message);
    noteRow(body, BLOCKED_COLS, 'could not load the blocked keys: ' + e.message, 'bad');
    body.dataset.loaded = '';
    return;
  }
  if (!fresh('blocked', t)) return;
  setStatus('');
  const keys = (r && r.keys) || [];
  const rows = keys.map((k) => {
    const h = k.head || {};
    const tr = document.createElement('tr');
    tr.dataset.id = h.id;
    tr.dataset.key = h.key;
    tr.tabIndex = 0;
    const since = timeCell(k.since);
    since.textContent = 'for ' + fmtRel(k.since).replace(/ ago$/, '');
    tr.append(
      el('td', h.key, 'key-cell'), el('td', h.topic), el('td', h.partition, 'n'), idCell(h.id),
      el('td', fmtNum(h.attempts), 'n'), since, el('td', fmtNum(k.waiting), 'n waiting'), dueCell(h), errorCell(h),
    );
    return tr;
  });
  body.dataset.loaded = '1';
  if (rows.length) body.replaceChildren(...rows);
  else noteRow(body, BLOCKED_COLS, p.after ? 'no more blocked keys' : 'no key is blocked' + (Object.keys(L.filter).length ? ' that matches the filter' : ''));
  p.next = r && r.next_after ? String(r.next_after) : null;
  $('blocked-next').disabled = !p.next;
  $('blocked-prev').disabled = !p.stack.length;
  $('blocked-page').textContent = 'page ' + (p.stack.length + 1) + ' · ' + plural(keys.length, 'key', 'keys');
}

// pager wires the buttons of a listing's paging.
function pager(prev, nextBtn, paging, load) {
  $(nextBtn).addEventListener('click', () => {
    const p = paging();
    if (!p.next) return;
    p.stack.push(p.after);
    p.after = p.next;
    load();
  });
  $(prev).addEventListener('click', () => {
    const p = paging();
    if (!p.stack.length) return;
    p.after = p.stack.pop();
    load();
  });
}

function openRow(tr) {
  if (tr && tr.dataset.id) location.hash = '#/entry/' + encodeURIComponent(tr.dataset.id);
}

// initLists wires the listings' controls; reload is called after the
// filter changes.
export function initLists(reload) {
  $('filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    applyFilter();
    reload();
  });
  pager('list-prev', 'list-next', () => L.list, loadList);
  pager('blocked-prev', 'blocked-next', () => L.blocked, loadBlocked);
  for (const id of ['entries-table', 'blocked-table']) {
    const tbody = $(id).tBodies[0];
    tbody.addEventListener('click', (ev) => {
      if (ev.target.closest('a, button')) return;
      openRow(ev.target.closest('tr'));
    });
    tbody.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' && !ev.target.closest('a, button')) openRow(ev.target.closest('tr')); });
  }
}
