// Helpers every view of the dashboard shares: the DOM, the API, formats,
// the status line, the toast and the confirmation dialog. Every piece of
// data from the server is inserted with textContent: payloads, keys and
// errors are untrusted.

export const $ = (id) => document.getElementById(id);

// S is the page's shared state: the current page, the last overview, the
// server's clock skew, read-only, the features of the store.
export const S = { page: '', ov: null, skew: 0, ro: true, features: {}, seq: {} };

export function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text != null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

// link is an <a> to the hash route href showing text.
export function link(href, text, cls) {
  const a = el('a', text, cls);
  a.href = href;
  return a;
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
export async function api(path, body) {
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
export function next(kind) { S.seq[kind] = (S.seq[kind] || 0) + 1; return S.seq[kind]; }
export function fresh(kind, t) { return S.seq[kind] === t; }

export const fmtNum = (n) => (n == null || isNaN(n) ? '–' : Number(n).toLocaleString('en-US'));
export const fmtLag = (s) => (s == null || isNaN(s) ? '–' : Number(s).toFixed(1) + ' s');
export const plural = (n, one, many) => n + ' ' + (n === 1 ? one : many);

export function fmtDur(sec) {
  const a = Math.abs(sec);
  if (a < 60) return Math.round(a) + ' s';
  if (a < 3600) return Math.round(a / 60) + ' min';
  if (a < 86400) return (a / 3600).toFixed(1) + ' h';
  return (a / 86400).toFixed(1) + ' d';
}

export const serverNow = () => Date.now() + S.skew;

// fmtRel says when t is relative to the server's now: "in 8 s", "3 min ago".
export function fmtRel(t) {
  if (!t) return '–';
  const ms = Date.parse(t);
  if (isNaN(ms)) return String(t);
  const d = (ms - serverNow()) / 1000;
  return d >= 0 ? 'in ' + fmtDur(d) : fmtDur(d) + ' ago';
}

// fmtTime shows an RFC 3339 time in UTC, to the second.
export function fmtTime(t) {
  if (!t) return '–';
  const ms = Date.parse(t);
  if (isNaN(ms)) return String(t);
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// timeCell is a cell showing t relative to now, with the exact time on
// hover.
export function timeCell(t, cls) {
  const td = el('td', fmtRel(t), 'nowrap' + (cls ? ' ' + cls : ''));
  if (t) td.title = fmtTime(t);
  return td;
}

export function setStatus(msg) {
  const s = $('status');
  s.textContent = msg || '';
  s.hidden = !msg;
}

export function toast(msg, ok) {
  const t = $('toast');
  t.textContent = msg;
  t.className = 'toast ' + (ok ? 'ok' : 'err');
  t.hidden = false;
}

// counts reads COUNTS from an object that has them inline or nested.
export const counts = (o) => (o && (o.stats || o.counts)) || o || {};

// noteRow fills tbody with one row of a muted note spanning cols columns:
// "loading…" before the first answer, "no entries" when there are none.
export function noteRow(tbody, cols, text, cls) {
  const tr = document.createElement('tr');
  const td = el('td', text, cls || 'muted');
  td.colSpan = cols;
  tr.append(td);
  tbody.replaceChildren(tr);
}

// loading marks tbody as loading, when it shows no answer yet.
export function loading(tbody, cols) {
  if (!tbody.dataset.loaded) noteRow(tbody, cols, 'loading…', 'muted loading');
}

// ---- confirmation -------------------------------------------------------

let confirmDone = null;

// confirmAction asks msg in the dialog; it resolves to the answer.
export function confirmAction(msg, yesLabel) {
  if (confirmDone) confirmDone(false);
  $('confirm-message').textContent = msg;
  $('confirm-yes').textContent = yesLabel || 'Yes';
  $('confirm-dialog').hidden = false;
  $('confirm-no').focus();
  return new Promise((resolve) => { confirmDone = resolve; });
}

export function closeConfirm(answer) {
  $('confirm-dialog').hidden = true;
  const done = confirmDone;
  confirmDone = null;
  if (done) done(answer);
}
