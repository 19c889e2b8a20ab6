package cli

// JSONHelp documents the shapes of -o json ('outbox help json'). Keys are
// only ever added to these shapes, never renamed or removed;
// TestJSONHelpListsEveryKey keeps this text and the code in step.
const JSONHelp = `The -o json output of the read commands

Times are RFC 3339 in UTC; a time that is not set is null. Keys are only
ever added, never renamed or removed.

outbox status -o json
  {"store": URL without its password, "kind": "postgres"|"mysql"|"redis",
   "outbox": the outbox's name in the store, "partitions": N,
   "total": COUNTS,
   "by_partition": [{"partition": P, ...COUNTS, "lease": LEASE|null,
                     "oldest_due_id": the oldest due entry's ID|null,
                     "blocked_keys": N|null}, ...]
                   (null when the backend does not report partitions;
                   oldest_due_id and blocked_keys are null when the
                   backend cannot list entries by state),
   "held": HOLD|null (null when not held, or the backend cannot be held),
   "sealed": true|false|null (null when the backend cannot be sealed),
   "paused": {"topics": [{"topic", "since": TIME}, ...],
              "partitions": [{"partition", "since": TIME}, ...]}|null
             (null when the backend cannot pause),
   "health": {"tables": [TABLE, ...], "memory": MEMORY|null,
              "warnings": [{"code", "object", "message": what is wrong,
                            what it costs and the fix}, ...]}|null
             (null when the backend does not report its health),
   "archive": {"empty": true|false, "oldest_sent": TIME|null,
               "oldest_age_seconds": seconds|null}|null
              (null when the backend keeps no archive),
   "health_error": why the health or the archive could not be read|null}
  COUNTS = "pending": N, "due": N, "parked": N,
           "oldest_due": TIME|null, "lag_seconds": seconds the oldest due
           entry has waited, by this host's clock (0 when none is due)
  LEASE  = {"owner": TOKEN, "version": N, "expires": TIME}
  HOLD   = {"reason": why it is held (a move names its ID and source),
            "since": TIME it was first held, by the store's clock}
  TABLE  = {"name", "bytes" (with its indexes), "live_rows", "dead_rows",
            "vacuums" (since the server's statistics were reset),
            "last_vacuum": TIME|null} (a figure the store cannot tell: -1)
  MEMORY = {"used_bytes", "rss_bytes", "fragmentation": rss over used}

outbox parked -o json
  {"entries": [ENTRY, ...], "next_after": the --after of the next page|null}
  ENTRY = {"id", "topic", "key", "partition", "attempts", "created_at",
           "not_before": TIME|null, "last_error" (in full), "headers": {},
           "payload_bytes"}

outbox entries --state STATE -o json
  {"state": "due"|"scheduled"|"retrying"|"parked",
   "entries": [INFO, ...], "next_after": the --after of the next page|null}
  INFO = ENTRY and "due_at": TIME|null (null when parked),
         "deferred": true when an open breaker deferred it (no attempt),
         "history": [ATTEMPT, ...] (the last 10 attempts, oldest first)
  ATTEMPT = {"at": TIME, "owner": the relay that made it, "error"}

outbox blocked -o json
  {"blocked": [{"key", "topic", "partition",
                "reason": "failing"|"deferred"|"paused",
                "head": INFO (the entry that holds the key back),
                "waiting": entries of the key behind the head,
                "since": TIME the key became blocked (store's clock),
                "blocked_seconds": how long, by this host's clock}, ...],
   "next_after": the --after of the next page|null}

outbox show ID -o json
  ENTRY and "state": "pending"|"parked", "due_at": TIME|null (null when
  parked), "payload_base64" (always), "payload_text" (when the payload is
  UTF-8), "payload_json" (when it is a JSON object or array, not cut),
  "payload_cut" (true when the payload is longer than --max-bytes: then
  payload_base64 and payload_text hold its first --max-bytes bytes),
  "deferred", "history": [ATTEMPT, ...] (as in INFO)

outbox relays -o json
  {"store", "kind", "outbox", "partitions",
   "relays": [{"owner", "listed": false for a lease holder without a
               membership record, "host", "version", "started": TIME|null,
               "last_heartbeat": TIME|null, "expires": TIME|null,
               "partitions": the partitions whose lease it holds,
               "reported_partitions": those its last heartbeat listed,
               "max_partitions": its cap (0: none)}, ...],
   "unheld": [{"partition", "pending", "due", "oldest_due": TIME|null}, ...]
             (partitions no relay holds while entries are pending)}

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
