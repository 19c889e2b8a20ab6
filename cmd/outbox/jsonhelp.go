package main

// jsonHelp documents the shapes of -o json ('outbox help json'). Keys are
// only ever added to these shapes, never renamed or removed;
// TestJSONHelpListsEveryKey keeps this text and the code in step.
const jsonHelp = `The -o json output of the read commands

Times are RFC 3339 in UTC; a time that is not set is null. Keys are only
ever added, never renamed or removed.

outbox status -o json
  {"store": URL without its password, "kind": "postgres"|"redis",
   "outbox": the outbox's name in the store, "partitions": N,
   "total": COUNTS,
   "by_partition": [{"partition": P, ...COUNTS, "lease": LEASE|null}, ...]
                   (null when the backend does not report partitions)}
  COUNTS = "pending": N, "due": N, "parked": N,
           "oldest_due": TIME|null, "lag_seconds": seconds the oldest due
           entry has waited, by this host's clock (0 when none is due)
  LEASE  = {"owner": TOKEN, "version": N, "expires": TIME}

outbox parked -o json
  {"entries": [ENTRY, ...], "next_after": the --after of the next page|null}
  ENTRY = {"id", "topic", "key", "partition", "attempts", "created_at",
           "not_before": TIME|null, "last_error" (in full), "headers": {},
           "payload_bytes"}

outbox show ID -o json
  ENTRY and "state": "pending"|"parked", "due_at": TIME|null (null when
  parked), "payload_base64" (always), "payload_text" (when the payload is
  UTF-8), "payload_json" (when it is a JSON object or array)

outbox migrate status -o json
  {"store", "kind", "outbox", "exists": true|false,
   "partitions": the stored count|null,
   "version": the newest applied migration (0: none)|null for Redis,
   "latest": the newest this build has|null for Redis,
   "migrations": [{"version", "name", "applied", "applied_at": TIME|null}, ...]
                 (null for Redis)}
`
