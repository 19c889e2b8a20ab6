// Package ui serves the outbox dashboard: an http.Handler built on the SPI
// alone, so it works on every conforming backend. It shows the backlog
// (pending, due, parked, lag, with a chart of each over the last minutes,
// sampled by the server), the partitions (lease holder, expiry, counts,
// lag, blocked keys, oldest due entry, pauses), the entries by state (due,
// scheduled, retrying, parked: filters, paging, the entry's detail and
// attempt history), the keys held back by their head entry, the relays
// of the fleet and, unless read-only, requeues and cancels one entry or a
// filtered set and pauses and resumes delivery of a topic or partition.
// The views of the optional operator interfaces (outbox.Lister,
// outbox.Pauser, outbox.MemberLister) are offered when the store
// implements them.
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
//	                           "sealed": bool|null, "paused": PAUSED|null, "features": {...},
//	                           "sample_interval_seconds": N,
//	                           "samples": [{"t", COUNTS}, ...] (oldest first)}
//	                          COUNTS = "pending", "due", "parked", "lag_seconds", "oldest_due"
//	                          PAUSED = {"topics": [{"topic","since"}, ...], "partitions":
//	                          [{"partition","since"}, ...]}; "paused" is PAUSED, or null
//	                          when the store cannot pause; "features": {"states", "pause",
//	                          "relays", "members", "entry", "cancel"}: the views the store
//	                          supports (Lister, Pauser, PartitionInspector, MemberLister,
//	                          Looker, Canceler)
//	GET  /api/partitions      {"partitions": [{"partition", COUNTS,
//	                           "lease": {"owner","version","expires"}|null,
//	                           "oldest_due_id": ID|null, "blocked_keys": N|null (both null
//	                           without a Lister), "paused_since": time|null}, ...]|null}
//	GET  /api/parked?topic=&key=&error=&since=&until=&after=&limit=
//	                          {"entries": [SUMMARY, ...], "next_after": ID|null}
//	                          SUMMARY = "id","topic","key","partition","attempts",
//	                          "created_at","last_error" (its first 300 bytes),
//	                          "last_error_bytes" (the whole error's length),"payload_bytes"
//	                          Entries are ordered by ID; limit defaults to 50, at most 500.
//	                          One request scans at most 10,000 parked entries: a page
//	                          may then hold fewer than limit (even none) with a
//	                          next_after to continue from; null means the end.
//	GET  /api/entries?state=&topic=&key=&error=&since=&until=&after=&limit=
//	                          {"state", "entries": [ITEM, ...], "next_after": ID|null}
//	                          state is due, scheduled, retrying or parked (required);
//	                          ITEM = SUMMARY and "state", "due_at", "deferred". The
//	                          entries of that state by Lister.Entries, in the byte order
//	                          of their IDs, limit as for /api/parked; without a Lister
//	                          only state=parked (as /api/parked lists it), else 501.
//	GET  /api/blocked?topic=&key=&error=&since=&until=&partition=&after=&limit=
//	                          {"keys": [{"head": ITEM, "waiting": N, "since"}, ...],
//	                           "next_after": CURSOR|null}
//	                          The keys held back by their head entry (Lister.BlockedKeys),
//	                          the longest blocked first; the filter applies to the head;
//	                          partition keeps the keys of one partition, picked from at
//	                          most 10,000 blocked keys per request (a page may then hold
//	                          fewer than limit with a next_after); after is the
//	                          next_after of the page before. 501 without a Lister.
//	GET  /api/entries/{id}    SUMMARY with the full "last_error" and "state" ("pending"|
//	                          "parked"), "status" (due|scheduled|retrying|parked, by the
//	                          dashboard's clock), "deferred", "not_before", "due_at",
//	                          "headers", "history": [{"at","owner","error"}, ...] (oldest
//	                          first), "actions": {"requeue": parked and not read-only,
//	                          "cancel": the store can cancel and not read-only},
//	                          "payload": {"bytes", "text"|null (valid UTF-8), "json"|null
//	                          (an object or array, indented), "hex" (a dump of the first
//	                          64 KiB), "base64"} (null with ?payload=none); 404 {"error"}
//	                          when there is none
//	GET  /api/relays          {"members": bool, "relays": [{"owner","listed","host",
//	                           "version","started","renewed","expires","max_partitions",
//	                           "reported": [P...], "held": [P...]}, ...],
//	                           "unheld": [{"partition", COUNTS}, ...]}
//	                          Every relay with a membership record (listed) and every
//	                          other holder of a live lease, by owner; held are the
//	                          partitions whose lease it holds, reported those it last
//	                          heartbeated; unheld are the partitions no lease holds
//	                          while entries are pending. 501 without a
//	                          PartitionInspector; without a MemberLister the lease
//	                          holders only ("members": false).
//	POST /api/requeue         {"ids": [...]} or {"filter": FILTER} -> {"requeued": N,
//	                           "refused": [{"id","reason"}], "more": bool}
//	POST /api/cancel          {"ids": [...]} or {"filter": FILTER} -> {"cancelled": N,
//	                           "more": bool}
//	                          one action takes at most 10,000 entries (named or
//	                          matched, in ID order); "more" is true when a filter
//	                          matched others beyond them: post it again
//	                          FILTER = {"topic","key","error","since","until"} (parked
//	                          entries only; the same matching as /api/parked)
//	POST /api/pause           {"topic": T} or {"partition": P} -> {"target", "changed",
//	POST /api/resume           "since", "paused": PAUSED}: pauses (resumes) delivery of
//	                          the topic or partition for every relay (outbox.Pauser);
//	                          "changed" is false when it already was as asked. 501
//	                          without a Pauser.
//
// Bad parameters are answered 400 with an error that names the parameter
// (state, limit, since, until, after, partition, payload, topic).
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
// Plain ES modules under assets/ (app.js, lib.js, lists.js, fleet.js,
// entry.js), no build step. Hash routes #/overview, #/partitions,
// #/entries/STATE (#/parked is #/entries/parked), #/blocked,
// #/blocked/PARTITION, #/relays, #/entry/ID. Until its first answer a view
// says "loading…"; a failed answer is shown in the status line (and in
// the view when it has nothing to show). Element IDs the browser tests use
// (stable): overview-pending, overview-due, overview-parked, overview-lag,
// chart-pending, chart-due, chart-parked, chart-lag, overview-blocked,
// paused, paused-table (rows data-topic=T or data-partition=P, each with a
// button.resume), pause-form, pause-topic-input, pause-topic;
// partitions-table (rows data-partition=P; the highest lag has class
// highest, its blocked keys a.blocked-link; button.pause or
// button.resume); tab-due, tab-scheduled, tab-retrying, tab-parked,
// entries-table (rows data-id=ID), filter-topic, filter-key, filter-error,
// filter-since, filter-until, filter-apply, list-next, list-prev,
// requeue-filtered, cancel-filtered; blocked-table (rows data-id=head ID,
// data-key=key; cells .waiting, .id-cell a), blocked-next, blocked-prev;
// relays-table (rows data-owner=O), unheld, unheld-table (rows
// data-partition=P); entry-detail, entry-back, entry-id, entry-state,
// entry-attempts, entry-last-error, entry-history, entry-headers,
// payload-text, payload-json, payload-hex (the three views; tabs
// view-text, view-json, view-hex), requeue-one, cancel-one,
// pause-entry-topic (Pause or Resume topic T);
// confirm-dialog, confirm-message, confirm-yes, confirm-no; status; toast
// (the last action's result).
package ui
