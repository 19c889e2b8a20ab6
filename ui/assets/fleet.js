// The partitions (#/partitions), the relays (#/relays), and pausing and
// resuming delivery by topic or partition.
import {
  $, S, el, link, api, next, fresh, fmtNum, fmtLag, fmtRel, fmtTime, timeCell, counts,
  setStatus, toast, noteRow, loading, confirmAction,
} from './lib.js';

// pauseAction confirms, then pauses (pause true) or resumes the target
// ({topic} or {partition}), reports it in the toast and calls after.
export async function pauseAction(pause, target, after) {
  if (S.ro) return;
  const what = target.topic != null ? 'topic "' + target.topic + '"' : 'partition ' + target.partition;
  const msg = pause
    ? 'Pause delivery of ' + what + '? Every relay stops handing its entries to the sink at its next fetch; they stay pending, and later entries of their keys wait behind them.'
    : 'Resume delivery of ' + what + '? The relays deliver its entries again at their next fetch.';
  if (!(await confirmAction(msg, pause ? 'Yes, pause' : 'Yes, resume'))) return;
  try {
    const r = await api(pause ? '/api/pause' : '/api/resume', target);
    const done = pause ? 'paused' : 'resumed';
    toast(r.changed ? done + ' ' + r.target : r.target + ' was already ' + (pause ? 'paused' : 'not paused'), true);
  } catch (e) {
    toast((pause ? 'pause' : 'resume') + ' failed: ' + e.message, false);
  }
  if (after) after();
}

function actionButton(text, cls, onClick) {
  const b = el('button', text, 'action ' + cls);
  b.type = 'button';
  b.addEventListener('click', (ev) => { ev.stopPropagation(); onClick(); });
  return b;
}

// paintPaused shows on the overview what is paused (PAUSED, or null when
// the store cannot pause), each with its resume button.
export function paintPaused(paused, reload) {
  const box = $('paused');
  box.hidden = !paused;
  if (!paused) return;
  const rows = [];
  for (const t of paused.topics || []) {
    const tr = document.createElement('tr');
    tr.dataset.topic = t.topic;
    const td = el('td');
    td.append(actionButton('Resume', 'resume', () => pauseAction(false, { topic: t.topic }, reload)));
    tr.append(el('td', 'topic'), el('td', t.topic, 'mono'), timeCell(t.since), td);
    rows.push(tr);
  }
  for (const p of paused.partitions || []) {
    const tr = document.createElement('tr');
    tr.dataset.partition = p.partition;
    const td = el('td');
    td.append(actionButton('Resume', 'resume', () => pauseAction(false, { partition: p.partition }, reload)));
    tr.append(el('td', 'partition'), el('td', p.partition, 'mono'), timeCell(p.since), td);
    rows.push(tr);
  }
  const body = $('paused-table').tBodies[0];
  if (rows.length) body.replaceChildren(...rows);
  else noteRow(body, 4, 'nothing is paused: every topic and partition is delivered');
}

// ---- partitions ---------------------------------------------------------

const PART_COLS = 10;

export async function loadPartitions() {
  const t = next('parts');
  const body = $('partitions-table').tBodies[0];
  loading(body, PART_COLS);
  let r;
  try {
    r = await api('/api/partitions');
  } catch (e) {
    if (!fresh('parts', t)) return;
    setStatus('partitions: ' + e.message);
    if (!body.dataset.loaded) noteRow(body, PART_COLS, 'could not load the partitions: ' + e.message, 'bad');
    return;
  }
  if (!fresh('parts', t)) return;
  setStatus('');
  const parts = (r && r.partitions) || [];
  // The lagging rows: up to three with the highest positive lag; the
  // first of them is the highest.
  const byLag = parts
    .filter((p) => Number(counts(p).lag_seconds) > 0)
    .sort((a, b) => counts(b).lag_seconds - counts(a).lag_seconds);
  const lagging = new Set(byLag.slice(0, Math.min(3, Math.max(1, Math.ceil(parts.length / 4)))).map((p) => p.partition));
  const highest = byLag.length ? byLag[0].partition : null;
  const rows = parts.map((p) => partitionRow(p, lagging.has(p.partition), p.partition === highest));
  body.dataset.loaded = '1';
  if (rows.length) body.replaceChildren(...rows);
  else noteRow(body, PART_COLS, 'no partitions (this backend does not report them)');
}

function partitionRow(p, lagging, highest) {
  const c = counts(p);
  const tr = document.createElement('tr');
  tr.dataset.partition = p.partition;
  const stranded = !p.lease && Number(c.pending) > 0;
  if (stranded) { tr.classList.add('stranded'); tr.title = 'no relay holds this partition while entries are pending'; }
  if (lagging) tr.classList.add('lagging');
  if (highest) tr.classList.add('highest');
  const blocked = el('td', null, 'n');
  if (p.blocked_keys == null) blocked.textContent = '–';
  else if (p.blocked_keys > 0 || highest) blocked.append(link('#/blocked/' + p.partition, fmtNum(p.blocked_keys) + (highest ? ' · what blocks it' : ''), 'blocked-link'));
  else blocked.textContent = '0';
  const oldest = el('td', null, 'id-cell');
  if (p.oldest_due_id) oldest.append(link('#/entry/' + encodeURIComponent(p.oldest_due_id), p.oldest_due_id));
  else oldest.textContent = '–';
  const lease = el('td', p.lease ? p.lease.owner : (stranded ? 'none' : '–'), p.lease ? '' : 'muted');
  const expires = p.lease ? timeCell(p.lease.expires) : el('td', '–');
  if (p.lease && p.lease.version != null) expires.title += ' (version ' + p.lease.version + ')';
  const pause = el('td', null, 'nowrap');
  if (p.paused_since) {
    const badge = el('span', 'paused', 'badge warn');
    badge.title = 'paused since ' + fmtTime(p.paused_since);
    pause.append(badge, ' ');
  }
  if (S.features.pause) {
    const paused = !!p.paused_since;
    pause.append(actionButton(paused ? 'Resume' : 'Pause', paused ? 'resume' : 'pause',
      () => pauseAction(!paused, { partition: p.partition }, loadPartitions)));
  }
  tr.append(
    el('td', p.partition), el('td', fmtNum(c.pending), 'n'), el('td', fmtNum(c.due), 'n'), el('td', fmtNum(c.parked), 'n'),
    el('td', fmtLag(c.lag_seconds), 'n lag'), blocked, oldest, lease, expires, pause,
  );
  return tr;
}

// ---- relays -------------------------------------------------------------

const RELAY_COLS = 7;

export async function loadRelays() {
  const t = next('relays');
  const body = $('relays-table').tBodies[0];
  loading(body, RELAY_COLS);
  let r;
  try {
    r = await api('/api/relays');
  } catch (e) {
    if (!fresh('relays', t)) return;
    setStatus('relays: ' + e.message);
    if (!body.dataset.loaded) noteRow(body, RELAY_COLS, 'could not load the relays: ' + e.message, 'bad');
    return;
  }
  if (!fresh('relays', t)) return;
  setStatus('');
  const rows = (r.relays || []).map((rl) => {
    const tr = document.createElement('tr');
    tr.dataset.owner = rl.owner;
    const owner = el('td', rl.owner, 'mono');
    if (!rl.listed) {
      tr.classList.add('unlisted');
      owner.append(' ', el('span', 'no membership record', 'badge'));
      owner.title = 'holds a lease but does not heartbeat: a relay without membership, or a tool';
    }
    const held = el('td', rl.held.length ? rl.held.join(', ') : 'none', rl.held.length ? 'held' : 'held muted');
    if (rl.listed && rl.reported.join(',') !== rl.held.join(',')) held.title = 'it last reported ' + (rl.reported.join(', ') || 'none');
    const beat = timeCell(rl.renewed);
    if (rl.expires) beat.title += ' · its record expires ' + fmtRel(rl.expires);
    tr.append(owner, el('td', rl.host || '–'), el('td', rl.version || '–'), timeCell(rl.started), beat, held,
      el('td', rl.max_partitions ? fmtNum(rl.max_partitions) : '–', 'n'));
    return tr;
  });
  body.dataset.loaded = '1';
  if (rows.length) body.replaceChildren(...rows);
  else noteRow(body, RELAY_COLS, 'no relay is running: no membership record and no live lease');
  $('relays-note').textContent = r.members ? ''
    : 'This backend keeps no membership records: the relays shown are the holders of live leases.';
  const unheld = (r.unheld || []).map((p) => {
    const tr = document.createElement('tr');
    tr.dataset.partition = p.partition;
    tr.className = 'stranded';
    const c = counts(p);
    tr.append(el('td', p.partition), el('td', fmtNum(c.pending), 'n'), el('td', fmtNum(c.due), 'n'), el('td', fmtLag(c.lag_seconds), 'n'));
    return tr;
  });
  $('unheld').hidden = !unheld.length;
  $('unheld-table').tBodies[0].replaceChildren(...unheld);
}

// initFleet wires the overview's pause form.
export function initFleet(reload) {
  $('pause-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const topic = $('pause-topic-input').value;
    if (topic === '') { toast('name the topic to pause', false); return; }
    pauseAction(true, { topic }, () => { $('pause-topic-input').value = ''; reload(); });
  });
}
