// Package controlrelay is the deliberately broken relay of the chaos
// harness's negative controls ("chaos control-relay <flags>"). It runs
// the real relay (outbox.NewRelay) over the real store and the real Kafka
// sink, built as `outbox relay` builds them for the same settings, with
// one wrapper between the relay and the sink that breaks a promise the
// checker (package chaos/history) must then catch. A control whose run the
// checker passes shows a blind checker, not a good relay.
//
// # Modes
//
// -mode lossy: the fraction -drop of the messages (default 0.001) is
// dropped, spread evenly (one in every 1/drop, from a random phase): a
// dropped message is not handed to Kafka, yet reported to the relay as
// published, so the outbox marks it sent and it is lost. The checker must
// report those entries lost, and nothing out of order (dropping keeps the
// order of what is published). The count dropped is logged at exit. A run
// of at least 1/drop records (1,000 at the default) loses at least one,
// so the control does not pass the checker by luck.
//
// -mode unordered: the entries of each Publish call are handed to the
// Kafka sink in a shuffled order, and the sink's results mapped back to
// the caller's order. The relay gives a sink one entry per key per call
// unless the sink is an [outbox.KeyOrderer] that reports true; so the
// wrapper reports KeepsKeyOrder() == true, gets a key's consecutive
// entries in one call, and breaks that promise on purpose. Whenever a call
// holds two or more entries of one key and topic, at least one key's
// entries are handed on out of their order (a shuffle that happens to keep
// every key's order is corrected by swapping two of a key's entries), so
// every such call reorders. The checker must report order violations, and
// nothing lost.
//
// A batch holds several entries of a key only if it spans their appends.
// Woken by the appenders' notifications and by its own lease renewals
// (under a second apart with the harness's settings), the relay fetches
// a partition about as soon as an entry is committed, while at the
// harness's rates a key gets an entry only every second or so: every batch
// would hold one entry of a key, and the shuffle would reorder nothing.
// So in this mode the store is wrapped to fetch each partition at most once
// per -gather (default 2s; a fetch asked for sooner finds nothing due,
// without a store call), unless the partition's last batch was full. The
// relay's other calls, and its notifications and fleet membership, go to
// the store as they are.
//
// -mode leak: the relay is honest (the Kafka sink unwrapped), but the
// process allocates -leak-rate bytes a second (default 256 KiB), writes
// every page of them and keeps them until it exits: a growing slice that
// the soak run's trend check (`chaos soak`) must flag in the relay's RSS.
// The bytes held are logged at exit.
//
// Both wrappers pass the Kafka sink's landing bound on
// ([outbox.LandingBounder]), so the relay keeps its lease boundary as
// `outbox relay` does; the lossy one passes the sink's KeepsKeyOrder on.
//
// # Flags
//
// -store (postgres://... or redis://...), -schema and -table (Postgres),
// -prefix (Redis), -kafka-brokers host:port,..., -mode, -drop, -gather,
// -leak-rate,
// -seed (the wrappers' random choices; 0 picks one, logged), and the
// relay settings the harness gives `outbox relay`: -lease-ttl (10s),
// -kafka-publish-timeout (1s), -batch (50; also the most messages per
// Publish call, as the harness's --max-in-flight), -poll-interval (250ms).
// Logs are JSON lines on stderr, as the harness runs `outbox relay
// --log-format json`.
package controlrelay
