// The outbox dashboard: the overview, the routing and the actions on
// entries. Vanilla ES2020 modules, no dependencies; the HTTP API is
// described in ui/doc.go. Every piece of data from the server is inserted
// with textContent: payloads, keys and errors are untrusted.
import {
  $, S, api, next, fresh, fmtNum, fmtLag, fmtDur, fmtTime, plural, counts,
  setStatus, toast, confirmAction, closeConfirm,
} from './lib.js';
import { STATES, showState, showBlocked, loadList, loadBlocked, initLists, applyFilter, describe } from './lists.js';
import { loadPartitions, loadRelays, paintPaused, initFleet, pauseAction } from './fleet.js';
import { loadEntry, shown, initEntry } from './entry.js';

const SVG = 'http://www.w3.org/2000/svg';
const REFRESH_MS = 5000;

// act confirms, posts a requeue or cancel, reports in the toast and then
// calls after.
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

// ---- top bar, read-only and features ------------------------------------

// setReadOnly hides every action in read-only mode, by the class ro of
// the body (the stylesheet hides .action under it): each view keeps its
// own hidden flags, which say what the view's state allows.
function setReadOnly(ro) {
  S.ro = ro;
  document.body.classList.toggle('ro', ro);
  $('badge-readonly').hidden = !ro;
}

// setFeatures shows the views the store supports, and only those.
function setFeatures(f) {
  S.features = f || {};
  for (const s of ['due', 'scheduled', 'retrying']) $('tab-' + s).hidden = !S.features.states;
  $('nav-blocked').hidden = !S.features.states;
  $('overview-blocked').hidden = !S.features.states;
  $('nav-relays').hidden = !S.features.relays;
  $('pause-form').hidden = !S.features.pause;
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
  const paused = ov.paused ? ov.paused.topics.length + ov.paused.partitions.length : 0;
  const pb = $('badge-paused');
  pb.hidden = !paused;
  pb.textContent = paused ? plural(paused, 'pause', 'pauses') : '';
  document.title = 'outbox' + (ov.outbox ? ' ' + ov.outbox : '') + (ov.store ? ' · ' + ov.store : '');
}

// ---- overview -----------------------------------------------------------

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
  const xy = pts.map(([x, v]) => [((x - x0) / (x1 - x0 || 1)) * W, H - pad - (v / top) * (H - 2 * pad)]);
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

const NUMS = ['overview-pending', 'overview-due', 'overview-parked', 'overview-lag'];

async function loadOverview() {
  const t = next('ov');
  let ov;
  try {
    ov = await api('/api/overview');
  } catch (e) {
    if (!fresh('ov', t)) return;
    setStatus('overview: ' + e.message);
    // Before the first answer the numbers say so, instead of loading forever.
    if (!S.ov) for (const id of NUMS) { $(id).textContent = 'unavailable'; $(id).className = 'num failed'; }
    return;
  }
  if (!fresh('ov', t) || !ov) return;
  setStatus('');
  S.ov = ov;
  const now = Date.parse(ov.now);
  S.skew = isNaN(now) ? 0 : now - Date.now();
  setReadOnly(!!ov.read_only);
  setFeatures(ov.features);
  paintTop(ov);
  const st = counts(ov);
  for (const id of NUMS) $(id).className = 'num';
  $('overview-pending').textContent = fmtNum(st.pending);
  $('overview-due').textContent = fmtNum(st.due);
  $('overview-parked').textContent = fmtNum(st.parked);
  $('overview-lag').textContent = fmtLag(st.lag_seconds);
  const samples = ov.samples || [];
  chart($('chart-pending'), samples, 'pending');
  chart($('chart-due'), samples, 'due');
  chart($('chart-parked'), samples, 'parked');
  chart($('chart-lag'), samples, 'lag_seconds');
  paintPaused(ov.paused, loadOverview);
  if (S.page === 'entry') paintEntryTopic();
  const meta = [];
  if (ov.partitions != null) meta.push(plural(ov.partitions, 'partition', 'partitions'));
  if (st.oldest_due) meta.push('oldest due ' + fmtTime(st.oldest_due));
  if (ov.sample_interval_seconds) meta.push('sampled every ' + ov.sample_interval_seconds + ' s');
  meta.push('updated ' + fmtTime(ov.now || new Date().toISOString()));
  $('overview-meta').textContent = meta.join(' · ');
}

// topicPaused reports whether the last overview says topic is paused.
function topicPaused(topic) {
  return !!(S.ov && S.ov.paused && S.ov.paused.topics.some((t) => t.topic === topic));
}

// paintEntryTopic labels the entry page's pause button for the topic of
// the entry shown: Pause or Resume, by the last overview.
function paintEntryTopic() {
  const e = shown();
  const b = $('pause-entry-topic');
  b.hidden = !e || !S.features.pause || !e.topic;
  if (b.hidden) return;
  b.textContent = (topicPaused(e.topic) ? 'Resume topic ' : 'Pause topic ') + e.topic;
}

// ---- routing ------------------------------------------------------------

// highlight marks the navigation entry of page, and the state tab of state.
function highlight(navPage, state) {
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.nav === navPage);
  for (const s of STATES) $('tab-' + s).classList.toggle('active', s === state);
  $('entry-back').href = '#/entries/' + (state || 'parked');
  $('entry-back').textContent = '← ' + (state || 'parked') + ' entries';
}

// parseRoute reads the hash: #/overview, #/partitions, #/relays,
// #/entries/STATE, #/parked (the parked entries), #/blocked[/P],
// #/entry/ID.
function parseRoute() {
  const h = location.hash.replace(/^#\/?/, '');
  const slash = h.indexOf('/');
  const name = slash < 0 ? h : h.slice(0, slash);
  let arg = slash < 0 ? '' : h.slice(slash + 1);
  try { arg = decodeURIComponent(arg); } catch { /* keep it raw */ }
  if (name === 'parked') return { page: 'entries', arg: 'parked' };
  if (name === 'entries') return { page: 'entries', arg: STATES.includes(arg) ? arg : 'parked' };
  if (['overview', 'partitions', 'relays', 'blocked', 'entry'].includes(name)) return { page: name, arg };
  return { page: 'overview', arg: '' };
}

function route() {
  const { page, arg } = parseRoute();
  S.page = page;
  S.arg = arg;
  for (const p of document.querySelectorAll('.page')) p.hidden = p.id !== 'page-' + page;
  $('filters').hidden = page !== 'entries' && page !== 'blocked';
  setStatus('');
  switch (page) {
    case 'overview': highlight('overview'); loadOverview(); break;
    case 'partitions': highlight('partitions'); loadPartitions(); break;
    case 'relays': highlight('relays'); loadRelays(); break;
    case 'entries': highlight('entries', arg); showState(arg); break;
    case 'blocked': {
      highlight('blocked');
      const p = /^\d+$/.test(arg) ? Number(arg) : null;
      showBlocked(p);
      break;
    }
    default:
      highlight('entries', null);
      loadEntry(arg, (state) => {
        if (S.page !== 'entry') return;
        highlight('entries', state);
        paintEntryTopic();
      });
  }
}

function tick() {
  if (document.hidden) return;
  loadOverview(); // the numbers, and the top bar's badges on every page
  if (S.page === 'partitions') loadPartitions();
  if (S.page === 'relays') loadRelays();
}

function init() {
  initLists(() => { if (S.page === 'blocked') loadBlocked(); else loadList(); });
  initFleet(loadOverview);
  initEntry();

  const filtered = (kind) => () => {
    const f = applyFilter();
    const verb = kind === 'requeue' ? 'Requeue' : 'Cancel (delete for good)';
    const scope = Object.keys(f).length ? ' (' + describe(f).replace(/^parked entries with /, 'matching ') + ')' : ' (all parked)';
    act(kind, { filter: f }, verb + ' ' + describe(f) + '?', scope, loadList);
  };
  $('requeue-filtered').addEventListener('click', filtered('requeue'));
  $('cancel-filtered').addEventListener('click', filtered('cancel'));

  $('requeue-one').addEventListener('click', () => {
    const e = shown();
    if (e) act('requeue', { ids: [e.id] }, 'Requeue entry ' + e.id + '? The relay delivers it again.', ' (' + e.id + ')', () => loadEntry(e.id, (st) => highlight('entries', st)));
  });
  $('cancel-one').addEventListener('click', () => {
    const e = shown();
    if (!e) return;
    const back = '#/entries/' + (e.status || 'parked');
    act('cancel', { ids: [e.id] }, 'Cancel entry ' + e.id + '? It is deleted for good and never delivered.', ' (' + e.id + ')', () => { location.hash = back; });
  });

  // Pause (or resume) the topic of the entry shown, from its page.
  $('pause-entry-topic').addEventListener('click', () => {
    const e = shown();
    if (!e) return;
    const paused = topicPaused(e.topic);
    pauseAction(!paused, { topic: e.topic }, async () => { await loadOverview(); paintEntryTopic(); });
  });

  $('confirm-yes').addEventListener('click', () => closeConfirm(true));
  $('confirm-no').addEventListener('click', () => closeConfirm(false));
  $('confirm-dialog').addEventListener('click', (ev) => { if (ev.target === ev.currentTarget) closeConfirm(false); });
  document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape' && !$('confirm-dialog').hidden) closeConfirm(false); });
  $('toast').addEventListener('click', () => { $('toast').hidden = true; });

  window.addEventListener('hashchange', route);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) tick(); });
  if (!location.hash) history.replaceState(null, '', '#/overview');
  route();
  if (S.page !== 'overview') loadOverview();
  setInterval(tick, REFRESH_MS);
}

init();
