package outbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Entry is one message waiting in the outbox.
//
// The caller sets ID (optional), Topic, Key, Payload, Headers and NotBefore
// when appending; the backend sets Partition, Attempts, LastError and
// CreatedAt, and reports them when the entry is fetched or inspected.
type Entry struct {
	// ID identifies the entry. Appending an ID that already exists is a
	// no-op, so a caller-supplied ID makes appends idempotent. Empty means
	// a new time-ordered UUIDv7. At most [MaxIDLen] bytes of valid UTF-8.
	// Every published message carries it so consumers can deduplicate.
	ID string
	// Topic is where the sink publishes the entry. Required.
	Topic string
	// Key orders entries: entries of one key are delivered in append
	// order, and a failing entry holds back the later entries of its key.
	// It also picks the partition ([PartitionOf]) and, in the Kafka sink,
	// the record key. Empty means unordered.
	Key string
	// Payload is the message body, opaque to the outbox. It may be empty.
	Payload []byte
	// Headers are published with the message.
	Headers map[string]string
	// NotBefore schedules delivery: the entry is not due before this time.
	// Zero means now.
	NotBefore time.Time

	// Partition is set by the backend: PartitionOf(Key, partitions).
	Partition int
	// Attempts counts failed delivery attempts so far.
	Attempts int
	// LastError is the error of the last failed attempt, if any.
	LastError string
	// CreatedAt is when the entry was appended, by the backend's clock.
	CreatedAt time.Time
}

// Limits on entry fields, checked by [PrepareEntries].
const (
	// MaxIDLen is the longest allowed Entry.ID, in bytes.
	MaxIDLen = 255
	// MaxTopicLen is the longest allowed Entry.Topic, in bytes.
	MaxTopicLen = 255
	// MaxKeyLen is the longest allowed Entry.Key, in bytes.
	MaxKeyLen = 4096
)

// Sentinel errors. Backends and the relay wrap them; check with errors.Is.
var (
	// ErrLeaseLost means a lease-fenced call was refused because the
	// caller no longer holds the lease at that version: it expired, was
	// taken over or was released. Nothing was changed.
	ErrLeaseLost = errors.New("outbox: lease lost")
	// ErrLeaseHeld means AcquireLease found the partition leased by
	// another owner.
	ErrLeaseHeld = errors.New("outbox: lease held by another owner")
	// ErrNotFound means the entry does not exist (or no longer does).
	ErrNotFound = errors.New("outbox: entry not found")
	// ErrClosed means the backend or relay was closed.
	ErrClosed = errors.New("outbox: closed")
	// ErrInvalidEntry means an appended entry breaks a rule; the error
	// text names the entry and the rule. Nothing of the call was written.
	ErrInvalidEntry = errors.New("outbox: invalid entry")
	// ErrInvalidArgument means an argument other than an entry is out of
	// range (a non-positive limit or TTL, an empty owner, a partition out
	// of range).
	ErrInvalidArgument = errors.New("outbox: invalid argument")
	// ErrNotRequeueable means Inspector.Requeue left a parked entry parked
	// because it can never be published as stored; the error is a
	// [*RequeueRefusedError] naming the entries and why.
	ErrNotRequeueable = errors.New("outbox: entry cannot be requeued")
)

// NewID returns a new entry ID: a UUIDv7, which sorts by creation time.
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}

// PartitionOf maps a key to its partition in [0, partitions): FNV-1a of the
// key, modulo partitions. It never changes, so entries of one key always
// land in one partition. partitions must be positive.
func PartitionOf(key string, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}

// PrepareEntries validates entries for appending and returns copies with
// the defaults filled in: a new ID where ID is empty, Partition set from the
// key, and the W3C trace context of ctx (headers "traceparent" and, when
// set, "tracestate") added to Headers when ctx carries a valid span and the
// entry does not set them itself, so the published message continues the
// appending trace.
//
// It rejects the whole call (an error wrapping [ErrInvalidEntry], naming the
// entry's index and the rule) if any entry is invalid, so a backend appends
// all of a call or nothing. Attempts, LastError and CreatedAt of the inputs
// are ignored (reset to zero). The result shares Payload (and Headers, when
// no trace header was added) with the input; backends must not modify them.
//
// Backends call PrepareEntries (or [PrepareEntriesWith], with the Limits
// their options carry) first thing in AppendInTx.
func PrepareEntries(ctx context.Context, entries []Entry, partitions int) ([]Entry, error) {
	return PrepareEntriesWith(ctx, entries, partitions, Limits{})
}

// Limits are rules a caller opts into, checked at append time by
// [PrepareEntriesWith] so that an entry that can never be published is
// rejected in the caller's transaction instead of being parked later by
// the sink. Each backend takes them in its Options (field Limits). The
// zero value checks nothing.
type Limits struct {
	// MaxPayload is the largest Entry.Payload accepted, in bytes. 0 (the
	// default) means no limit; a negative value is rejected with
	// [ErrInvalidArgument].
	MaxPayload int
	// Topic, when set, checks each Entry.Topic; a non-nil error rejects
	// the entry, and its text should say what is wrong and how to fix it.
	// Default nil: only the built-in topic rules apply.
	Topic func(topic string) error
}

// PrepareEntriesWith is [PrepareEntries] with limits also checked: an
// entry whose Payload is longer than limits.MaxPayload, or whose Topic
// limits.Topic refuses, rejects the whole call with an error wrapping
// [ErrInvalidEntry] that names the entry, the limit and the fix.
func PrepareEntriesWith(ctx context.Context, entries []Entry, partitions int, limits Limits) ([]Entry, error) {
	if limits.MaxPayload < 0 {
		return nil, fmt.Errorf("%w: Limits.MaxPayload is %d; use 0 (no limit) or a positive byte count", ErrInvalidArgument, limits.MaxPayload)
	}
	if partitions < 1 {
		return nil, fmt.Errorf("%w: partitions is %d, must be at least 1", ErrInvalidArgument, partitions)
	}
	var trace propagation.MapCarrier
	if sc := traceSpanContext(ctx); sc.IsValid() {
		trace = propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, trace)
	}
	out := make([]Entry, len(entries))
	for i, e := range entries {
		if err := validateEntry(&e); err != nil {
			return nil, fmt.Errorf("%w: entry %d (id %q): %s", ErrInvalidEntry, i, e.ID, err)
		}
		if err := limits.check(&e); err != nil {
			return nil, fmt.Errorf("%w: entry %d (id %q): %w", ErrInvalidEntry, i, e.ID, err)
		}
		if e.ID == "" {
			e.ID = NewID()
		}
		e.Partition = PartitionOf(e.Key, partitions)
		e.Attempts, e.LastError, e.CreatedAt = 0, "", time.Time{}
		if _, set := e.Headers[HeaderTraceparent]; trace != nil && !set {
			h := make(map[string]string, len(e.Headers)+len(trace))
			maps.Copy(h, trace)
			maps.Copy(h, e.Headers)
			e.Headers = h
		}
		out[i] = e
	}
	return out, nil
}

// HeaderTraceparent is the header that carries the appending span's W3C
// trace context to the published message.
const HeaderTraceparent = "traceparent"

func traceSpanContext(ctx context.Context) trace.SpanContext {
	return trace.SpanContextFromContext(ctx)
}

func validateEntry(e *Entry) error {
	switch {
	case len(e.ID) > MaxIDLen:
		return fmt.Errorf("ID is %d bytes, the limit is %d", len(e.ID), MaxIDLen)
	case !utf8.ValidString(e.ID) || strings.ContainsRune(e.ID, 0):
		return errors.New("ID must be valid UTF-8 without NUL bytes")
	case e.Topic == "":
		return errors.New("Topic is empty; set the topic the sink publishes to")
	case len(e.Topic) > MaxTopicLen:
		return fmt.Errorf("Topic is %d bytes, the limit is %d", len(e.Topic), MaxTopicLen)
	case !utf8.ValidString(e.Topic):
		return errors.New("Topic must be valid UTF-8")
	case len(e.Key) > MaxKeyLen:
		return fmt.Errorf("Key is %d bytes, the limit is %d", len(e.Key), MaxKeyLen)
	}
	for k := range e.Headers {
		if k == "" {
			return errors.New("a header has an empty name")
		}
	}
	return nil
}

func (l Limits) check(e *Entry) error {
	if l.MaxPayload > 0 && len(e.Payload) > l.MaxPayload {
		return fmt.Errorf("Payload is %d bytes, over Limits.MaxPayload of %d; make the payload smaller (or store it elsewhere and send a reference), or raise the limit if the sink accepts larger messages",
			len(e.Payload), l.MaxPayload)
	}
	if l.Topic != nil {
		if err := l.Topic(e.Topic); err != nil {
			return fmt.Errorf("Topic %q is refused by Limits.Topic: %w", e.Topic, err)
		}
	}
	return nil
}

// Clone returns a deep copy of e: its Payload and Headers are not shared.
func (e Entry) Clone() Entry {
	if e.Payload != nil {
		e.Payload = append([]byte(nil), e.Payload...)
	}
	e.Headers = maps.Clone(e.Headers)
	return e
}

// HeaderKeySeq is the header that carries an entry's per-key sequence
// number, as decimal text ("1", "2", ...), when the backend that appended
// it numbers keys (the KeySequence option of the Postgres, Redis and
// memory backends). The backend puts it into the entry's Headers at
// append, inside the caller's transaction (the memory backend at commit);
// the relay publishes it like any other header (the Kafka sink as a record
// header), and Lookup, Parked and fetched entries show it.
//
// What is promised, per outbox and per non-empty key: the committed
// entries of the key are numbered 1, 2, 3, ... in append order, without
// a gap and without a repeat. A rolled-back append leaves no gap and an
// idempotent re-append of an existing ID takes no number. Entries with an
// empty Key get no number. A cancelled entry leaves a gap (its number is
// never published); a requeued or retried entry keeps its number. A
// consumer that sees a number at or below the last one of its key got a
// duplicate (at-least-once delivery); one that sees a jump missed entries,
// or the entries it missed were cancelled.
const HeaderKeySeq = "outbox-key-seq"

// ParseKeySeq parses a [HeaderKeySeq] value: decimal digits of a number of
// at least 1, no sign, no leading zeros, no spaces.
func ParseKeySeq(v string) (int64, error) {
	if v == "" || v[0] < '1' || v[0] > '9' {
		return 0, fmt.Errorf("outbox: header %s value %q is not a sequence number (decimal, 1 or more, no leading zeros)", HeaderKeySeq, v)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("outbox: header %s value %q is not a sequence number: %w", HeaderKeySeq, v, errors.Unwrap(err))
	}
	return n, nil
}

// KeySeq returns the entry's per-key sequence number from its
// [HeaderKeySeq] header, and false when it has none or the value does not
// parse.
func (e Entry) KeySeq() (int64, bool) {
	v, ok := e.Headers[HeaderKeySeq]
	if !ok {
		return 0, false
	}
	n, err := ParseKeySeq(v)
	return n, err == nil
}
