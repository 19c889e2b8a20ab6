// Package ui serves the outbox dashboard: an http.Handler built on the SPI
// alone, so it works on every conforming backend. It shows the backlog
// (pending, due, parked, lag, with a chart of each over the last minutes,
// sampled by the server), the partitions (lease holder, expiry, counts,
// lag), the parked entries (filters, paging, the entry's detail) and,
// unless read-only, requeues and cancels one entry or a filtered set.
// `outbox ui` serves it; `outbox relay --ui-addr` and `outbox demo --ui`
// too. See docs/dashboard.md.
//
// # HTTP API
//
// Every response is JSON except the page and its assets. Times are RFC
// 3339 in UTC; a time that is not set is null.
//
//	GET  /                    the page (assets under /assets/, embedded)
//	GET  /api/overview        {"store", "kind", "outbox", "read_only", "partitions", "now",
//	                           "stats": COUNTS, "held": {"held","reason","since"}|null,
//	                           "sealed": bool|null, "sample_interval_seconds": N,
//	                           "samples": [{"t", COUNTS}, ...] (oldest first)}
//	                          COUNTS = "pending", "due", "parked", "lag_seconds", "oldest_due"
//	GET  /api/partitions      {"partitions": [{"partition", COUNTS,
//	                           "lease": {"owner","version","expires"}|null}, ...]|null}
//	GET  /api/parked?topic=&key=&error=&since=&until=&after=&limit=
//	                          {"entries": [SUMMARY, ...], "next_after": ID|null}
//	                          SUMMARY = "id","topic","key","partition","attempts",
//	                          "created_at","last_error" (its first 300 bytes),"payload_bytes"
//	                          Entries are ordered by ID; limit defaults to 50, at most 500.
//	                          One request scans at most 10,000 parked entries: a page
//	                          may then hold fewer than limit (even none) with a
//	                          next_after to continue from; null means the end.
//	GET  /api/entries/{id}    SUMMARY with the full "last_error" and "state" ("pending"|
//	                          "parked"), "not_before", "due_at", "headers",
//	                          "payload": {"bytes", "text"|null (valid UTF-8), "json"|null
//	                          (an object or array, indented), "hex" (a dump of the first
//	                          64 KiB), "base64"}; 404 {"error"} when there is none
//	POST /api/requeue         {"ids": [...]} or {"filter": FILTER} -> {"requeued": N,
//	                           "refused": [{"id","reason"}], "more": bool}
//	POST /api/cancel          {"ids": [...]} or {"filter": FILTER} -> {"cancelled": N,
//	                           "more": bool}
//	                          one action takes at most 10,000 entries (named or
//	                          matched, in ID order); "more" is true when a filter
//	                          matched others beyond them: post it again
//	                          FILTER = {"topic","key","error","since","until"} (parked
//	                          entries only; the same matching as /api/parked)
//
// Errors are {"error": "..."} with a 4xx or 5xx status.
//
// # Security
//
// Actions are POSTs that need, besides the JSON content type, the header
// X-Outbox-CSRF equal to the cookie outbox_csrf the page sets, and an
// Origin (when the browser sends one) equal to the request's host: another
// site cannot make a browser post to the dashboard. Read-only mode answers
// every POST with 403 and the page shows no action. With Options.Token or
// Options.BasicUser set, every request needs the token (the header
// "Authorization: Bearer TOKEN", or ?token=TOKEN once, which sets a
// cookie) or the basic credentials; outbox ui refuses to listen on a
// non-loopback address without one of them. No password of the store URL
// is ever rendered: the store is shown as [Options.StoreName].
//
// # The page
//
// Hash routes #/overview, #/partitions, #/parked, #/entry/ID. Element IDs
// the browser test uses (stable): overview-pending, overview-due,
// overview-parked, overview-lag, chart-pending, chart-due, chart-parked,
// chart-lag; partitions-table (rows data-partition=P); parked-table (rows
// data-id=ID), filter-topic, filter-key, filter-error, filter-since,
// filter-until, filter-apply, parked-next, parked-prev, requeue-filtered,
// cancel-filtered; entry-detail, entry-id, entry-state, entry-attempts,
// entry-last-error, entry-headers, payload-text, payload-json, payload-hex
// (the three views; tabs view-text, view-json, view-hex), requeue-one,
// cancel-one; confirm-dialog, confirm-message, confirm-yes, confirm-no;
// toast (the last action's result).
package ui
