// Package history records what a chaos run appended and what the broker
// holds, and checks the two against the outbox's promises: at least once
// (nothing committed is lost), per-key order, nothing delivered that was
// never committed, duplicates per fault, and recovery time after a fault.
//
// # Recording
//
// Appenders call [Writer.Append] for an entry only after its commit
// returned success, and [Writer.Unknown] for an entry whose commit outcome
// is unknown (the connection died during COMMIT). An unknown entry is
// retried with the same ID; when a retry is confirmed the appender records
// it with Append as well, and Append wins. The consumer calls
// [Writer.Delivered] for every record the broker holds, in the order it
// reads a partition. The harness calls [Writer.Fault] when it injects a
// fault. Each process writes its own file; [ReadFiles] merges them.
//
// The same calls exist on [History] for a checker fed in memory.
//
// # File format
//
// JSON lines, one event per line (blank lines are skipped):
//
//	{"op":"append","id":"e1","key":"k","seq":1,"partition":0,"at":"2026-01-02T15:04:05Z"}
//	{"op":"unknown","id":"e2","key":"k","seq":2}
//	{"op":"deliver","topic":"t","partition":0,"offset":7,"id":"e1","key":"k","at":"2026-01-02T15:04:06Z"}
//	{"op":"fault","at":"2026-01-02T15:04:05.5Z","what":"SIGKILL relay 1"}
//
// "partition" and "at" are optional on append and unknown lines; a
// deliver line needs topic, partition, offset, id and at; a fault line
// needs at. A bad line is an error naming the file and the line number.
//
// # Keys and sequence numbers
//
// Seq is the appender's per-key sequence number: the order in which the
// entries of the key were committed, 1, 2, 3, ... A key must be appended
// by one appender at a time (give each appender its own keys), otherwise
// there is no commit order to check against. Entries with an empty key or
// a zero Seq are not order-checked.
//
// # Verdicts
//
//   - Lost: appended (committed), never delivered. Unknown entries are never
//     lost. Each lost entry is attributed to the nearest fault at or before
//     its commit time (Entry.At), when it has one.
//   - Duplicates: deliveries of an ID beyond its first, at distinct offsets.
//     The same (topic, partition, offset) read twice is a consumer re-read,
//     not a duplicate. Each duplicate is attributed to the nearest fault at
//     or before its delivery time.
//   - Order violations: walking each partition in offset order, the first
//     delivery of an entry whose Seq is below the highest Seq already
//     first-delivered for its key, or a key first-delivered on a second
//     partition. Unknown entries take part only if they were delivered.
//   - Unexpected: delivered IDs that were never appended nor unknown (a
//     rolled-back transaction that was relayed anyway).
//   - Recovery: each fault owns the window from its time t to the next
//     fault (the last one to the end of the history, its latest delivery),
//     as duplicates are attributed to the nearest preceding fault. Its
//     recovery is the largest gap between consecutive deliveries of any
//     partition that delivered before t, clipped to the window: a gap
//     spanning t is measured from t, a gap spanning the next fault ends
//     there (the rest is the next fault's), and a partition silent until
//     the window's end counts up to it. A partition here is the outbox
//     partition the appender recorded for the entry (Entry.Partition: the
//     relay's unit of work, which a fault stalls), or the broker's topic
//     partition for deliveries of entries recorded without one. The report
//     gives p50/p90/max over faults. It is meaningful only when appenders
//     keep every partition busy.
package history
