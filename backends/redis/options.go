package redisoutbox

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/outboxrelay/outbox"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "{outbox}"

// Options configures a [Backend]. The zero value is usable: every zero field
// takes its documented default.
type Options struct {
	// Prefix is the key prefix of this outbox. It must contain exactly one
	// well-formed, non-empty hash tag "{...}" (and no other brace). Each
	// partition p gets its own tag, the tag with ":p" appended, so
	// partitions spread over Cluster slots while every key of one partition
	// shares one slot: prefix "{outbox}" gives partition 3 the keys
	// "{outbox:3}:entries", "{outbox:3}:pending" and so on. Default
	// [DefaultPrefix].
	Prefix string

	// Partitions is the number of partitions, which is stored with the
	// outbox (the key "<Prefix>:meta") and fixed for its life.
	//
	// 0 (the default) reads the stored count; when none is stored, no
	// outbox exists at Prefix and New fails. A positive count (at most
	// 16384) creates the outbox when none is stored yet: New stores it
	// atomically, so constructors racing to create one outbox agree on the
	// first count stored. When a count is stored already, a positive
	// Partitions must equal it, else New fails with an
	// [outbox.PartitionMismatchError].
	Partitions int

	// Logger receives the startup warnings (an evicting maxmemory-policy)
	// and the rare repairs (a corrupt entry parked outside the claim
	// script). Default slog.Default().
	Logger *slog.Logger

	// MaxErrorLen truncates Failure.Error before it is stored as
	// LastError, in bytes (cut at a UTF-8 boundary). Default 4096; values
	// below 1024 are raised to 1024.
	MaxErrorLen int

	// NoNotify turns off the pub/sub wake-ups: appends publish nothing
	// and [Backend.Notifications] opens no subscription. Default false:
	// each append that adds entries to a partition publishes the
	// partition's number on the partition's channel in the same EXEC
	// (SPUBLISH, see [Backend.Notifications]).
	NoNotify bool

	// Limits are rules checked at append (a payload size limit, a topic
	// rule; see [outbox.Limits]): an entry that breaks one is rejected
	// with an error wrapping [outbox.ErrInvalidEntry] and nothing of the
	// call is queued. For Kafka, use kafkasink.Limits. Default: the zero
	// value, which checks nothing (an oversized payload or an illegal
	// topic then fails at publish and the entry is parked).
	Limits outbox.Limits

	// KeySequence numbers the entries of each non-empty key: appends put
	// the key's next number, 1, 2, 3, ..., as decimal text into the
	// entry's [outbox.HeaderKeySeq] header, which the relay publishes
	// with it (a Kafka record header).
	//
	// What is promised, per outbox and per key: the entries of a key
	// that were appended carry 1..N in append order, with no gap and no
	// repeat. The counter is a field of the partition's hash
	// "{prefix:p}:keyseq" (in the partition's slot), incremented by the
	// append script itself, which runs inside the caller's MULTI/EXEC:
	// a transaction that is discarded (DISCARD, a WATCH conflict, a
	// command refused when queued) runs nothing and takes no number, and
	// an entry whose ID is already stored (an idempotent re-append) takes
	// none. Entries with an empty Key get no number and no header. Redis
	// has no rollback: when another command of the caller's EXEC fails at
	// run time, the entries are appended anyway (see [CheckExec]) with
	// their numbers; cancelling them to compensate leaves gaps. A
	// cancelled entry leaves a gap, which consumers see. A requeued or
	// retried entry keeps its number. An entry sent and then appended
	// again under the same ID is a new entry and takes a new number.
	//
	// Costs: the appends run append_keyseq.lua instead of append.lua (a
	// larger body sent with every EVAL and, per keyed entry, one HINCRBY):
	// measured, about 3µs more Redis CPU per single-entry transaction and
	// 1.2-1.8µs per keyed entry in a batch (docs/redis.md, "Per-key
	// sequence numbers"). The hash keeps one field per key ever numbered
	// (about 74 bytes for a 20-byte key) and is never trimmed (deleting
	// a field restarts its key at 1).
	//
	// An entry that sets the header itself is refused with an error
	// wrapping [outbox.ErrInvalidEntry]. Turn it on for every appender of
	// an outbox, or keys are numbered only by some of them. Default
	// false: appends run append.lua, unchanged, and the hash is never
	// written.
	KeySequence bool
}

// maxPartitions bounds Options.Partitions: more partitions than Cluster
// slots buy nothing.
const maxPartitions = 16384

func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := validatePrefix(o.Prefix); err != nil {
		return o, err
	}
	if o.Partitions < 0 || o.Partitions > maxPartitions {
		return o, fmt.Errorf("redisoutbox: Options.Partitions is %d; use 0 (read the count stored with the outbox) or 1..%d (create the outbox with that count, or check it against the stored one)", o.Partitions, maxPartitions)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.MaxErrorLen == 0:
		o.MaxErrorLen = 4096
	case o.MaxErrorLen < 1024:
		o.MaxErrorLen = 1024
	}
	return o, nil
}

// validatePrefix checks that p holds exactly one well-formed, non-empty
// hash tag and no other brace.
func validatePrefix(p string) error {
	const fix = `; write the prefix with exactly one non-empty hash tag, for example "{outbox}" or "app:{orders}"`
	open, close := strings.Count(p, "{"), strings.Count(p, "}")
	switch {
	case open == 0 && close == 0:
		return fmt.Errorf("redisoutbox: Options.Prefix %q has no hash tag, so the keys of a partition would spread over Redis Cluster slots and the scripts would fail with CROSSSLOT%s", p, fix)
	case open != 1 || close != 1:
		return fmt.Errorf("redisoutbox: Options.Prefix %q must contain exactly one '{' and one '}' (it has %d and %d): Redis Cluster hashes only the first tag, and a second one is a mistake waiting to happen%s", p, open, close, fix)
	}
	i, j := strings.IndexByte(p, '{'), strings.IndexByte(p, '}')
	switch {
	case j < i:
		return fmt.Errorf("redisoutbox: Options.Prefix %q has '}' before '{'%s", p, fix)
	case j == i+1:
		return fmt.Errorf("redisoutbox: Options.Prefix %q has an empty hash tag \"{}\", which Redis Cluster ignores (it would hash the whole key)%s", p, fix)
	}
	return nil
}

var errNilClient = errors.New("redisoutbox: New: client is nil; pass a *redis.Client, *redis.ClusterClient or any redis.UniversalClient")
