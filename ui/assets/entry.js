// One entry (#/entry/ID): its state, attempt history, headers and payload,
// and the actions its state allows.
import { $, el, api, next, fresh, fmtNum, fmtRel, fmtTime, noteRow } from './lib.js';

const VIEWS = ['json', 'text', 'hex'];

// current is the entry shown (the answer of /api/entries/ID), null when
// none is.
let current = null;
export const shown = () => current;

export function showView(v) {
  for (const k of VIEWS) {
    $('payload-' + k).hidden = k !== v;
    const tab = $('view-' + k);
    tab.classList.toggle('active', k === v);
    tab.setAttribute('aria-selected', String(k === v));
  }
}

function headerRows(h) {
  const pairs = h && typeof h === 'object' ? Object.entries(h) : [];
  return pairs.map(([k, v]) => {
    const tr = document.createElement('tr');
    tr.append(el('th', k), el('td', typeof v === 'string' ? v : JSON.stringify(v)));
    return tr;
  });
}

// The badge and explanation of each state.
const STATE_TEXT = {
  due: 'due: waiting to be fetched, claimed by a relay, or held back by an earlier entry of its key',
  scheduled: 'scheduled: due at a future time, never attempted',
  retrying: 'retrying: attempted, due again at a future time',
  parked: 'parked: never delivered until requeued',
};

// onState is called with the state of each entry shown, so that the
// navigation follows it.
export async function loadEntry(id, onState) {
  const t = next('entry');
  $('entry-id').textContent = '';
  $('entry-loading').hidden = false;
  let e;
  try {
    e = await api('/api/entries/' + encodeURIComponent(id));
  } catch (err) {
    if (!fresh('entry', t)) return;
    current = null;
    $('entry-loading').hidden = true;
    $('entry-body').hidden = true;
    const m = $('entry-missing');
    m.textContent = err.status === 404 ? err.message : 'entry ' + id + ': ' + err.message;
    m.hidden = false;
    onState(null);
    return;
  }
  if (!fresh('entry', t) || !e) return;
  current = e;
  $('entry-loading').hidden = true;
  $('entry-missing').hidden = true;
  $('entry-body').hidden = false;
  $('entry-id').textContent = e.id;
  const state = e.status || e.state;
  const st = $('entry-state');
  st.textContent = state + (e.deferred ? ' (deferred)' : '');
  st.title = STATE_TEXT[state] || '';
  st.className = 'badge ' + (state === 'parked' ? 'warn' : 'ok');
  onState(state);
  const acts = e.actions || {};
  $('requeue-one').hidden = !acts.requeue; // the server says what the state and read-only allow
  $('cancel-one').hidden = !acts.cancel;
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
  paintHistory(e.history || []);
  const hrows = headerRows(e.headers);
  const hb = $('entry-headers').tBodies[0];
  if (hrows.length) hb.replaceChildren(...hrows);
  else noteRow(hb, 2, '(none)');
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

// paintHistory shows the attempts, the latest first.
function paintHistory(history) {
  const body = $('entry-history').tBodies[0];
  const rows = history.slice().reverse().map((a) => {
    const tr = document.createElement('tr');
    const at = el('td', fmtTime(a.at), 'nowrap');
    at.title = fmtRel(a.at);
    tr.append(at, el('td', a.owner || '–', 'mono'), el('td', a.error, 'err'));
    return tr;
  });
  if (rows.length) body.replaceChildren(...rows);
  else noteRow(body, 3, 'never attempted');
}

export function initEntry() {
  for (const k of VIEWS) $('view-' + k).addEventListener('click', () => showView(k));
}
