package cli

// JSONHelp documents the shapes of -o json ('outbox help json'). Keys are
// only ever added to these shapes, never renamed or removed;
// TestJSONHelpListsEveryKey keeps this text and the code in step.
const JSONHelp = `The -o json output of the read commands

Times are RFC 3339 in UTC; a time that is not set is null. Keys are only
ever added, never renamed or removed.

outbox status -o json
  {"store": URL without its password, "kind": "postgres"|"redis",
   "outbox": the outbox's name in the store, "partitions": N,
   "total": COUNTS,
   "by_partition": [{"partition": P, ...COUNTS, "lease": LEASE|null}, ...]
                   (null when the backend does not report partitions),
   "held": HOLD|null (null when not held, or the backend cannot be held),
   "sealed": true|false|null (null when the backend cannot be sealed)}
  COUNTS = "pending": N, "due": N, "parked": N,
           "oldest_due": TIME|null, "lag_seconds": seconds the oldest due
           entry has waited, by this host's clock (0 when none is due)
  LEASE  = {"owner": TOKEN, "version": N, "expires": TIME}
  HOLD   = {"reason": why it is held (a move names its ID and source),
            "since": TIME it was first held, by the store's clock}

outbox parked -o json
  {"entries": [ENTRY, ...], "next_after": the --after of the next page|null}
  ENTRY = {"id", "topic", "key", "partition", "attempts", "created_at",
           "not_before": TIME|null, "last_error" (in full), "headers": {},
           "payload_bytes"}

outbox show ID -o json
  ENTRY and "state": "pending"|"parked", "due_at": TIME|null (null when
  parked), "payload_base64" (always), "payload_text" (when the payload is
  UTF-8), "payload_json" (when it is a JSON object or array, not cut),
  "payload_cut" (true when the payload is longer than --max-bytes: then
  payload_base64 and payload_text hold its first --max-bytes bytes)

outbox move --dry-run -o json, outbox move --verify -o json
  {"source": SIDE, "destination": SIDE,
   "sealed": whether the source is sealed,
   "held": HOLD|null (the destination's hold),
   "move_id": the ID of the move holding the destination|null,
   "complete": the source sealed and empty, the destination released,
   "next": what the next step is (or would do)}
  SIDE = {"store", "kind", "outbox", "partitions",
          "due", "waiting" (scheduled or retrying), "parked", "total"}

outbox migrate status -o json
  {"store", "kind", "outbox", "exists": true|false,
   "partitions": the stored count|null,
   "version": the newest applied migration (0: none)|null for Redis,
   "latest": the newest this build has|null for Redis,
   "migrations": [{"version", "name", "applied", "applied_at": TIME|null}, ...]
                 (null for Redis)}
`
