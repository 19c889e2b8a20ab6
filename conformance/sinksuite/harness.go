package sinksuite

import (
	"context"
	"testing"

	"github.com/outboxrelay/outbox"
)

// NewHarness makes a fresh Harness for one subtest: a new, isolated
// destination on the broker (its own topic, stream and subject, exchange
// and queue, or vhost, with a random suffix) and a sink that publishes
// entries of cfg.Topic there. The suite calls it once per subtest, from
// parallel subtests at once. It registers its own cleanup with t.Cleanup
// (closing the sink, the reader and the destination) and fails t
// (t.Fatal) if the destination cannot be set up; it skips t (through
// internal/testenv or t.Skip) when the broker cannot be reached.
type NewHarness func(t *testing.T, cfg Config) Harness

// Config is what a case asks of the destination it gets.
type Config struct {
	// Topic is the Entry.Topic of every entry the case publishes. The
	// sink must publish entries of this topic to the harness's
	// destination (a harness maps it with the sink's topic option when the
	// broker's name for the destination differs).
	Topic string
}

// Harness connects the suite to one destination on the broker under test.
// Its methods may be called from several goroutines at once.
type Harness interface {
	// Sink returns the sink under test, publishing entries of
	// Config.Topic to the destination. It returns the same sink every
	// time. The suite may call its Close (a method Close() error or
	// Close()) and expects a second Close, including the harness's own in
	// its cleanup, to be safe.
	Sink() outbox.Sink

	// Read returns every message the broker holds for the destination,
	// waiting until it holds at least n or ctx ends; when ctx ends first
	// it returns what it has and a nil error (an error means the
	// destination could not be read at all). What it returns is complete
	// up to the moment it returns: every message written before Read was
	// called is in it, so Read(ctx, 0) is a snapshot of the destination
	// now (the suite takes one, waits, and takes another to check that
	// nothing landed in between). Each call returns everything written so
	// far, not only what is new since the last call: it must not consume
	// destructively in a way that hides a message from a later Read, and
	// it returns each copy of a message the broker holds twice (the suite
	// counts duplicates). The messages of one Key are in the order the
	// broker holds them (a consumer's order); messages of different keys
	// may be interleaved in any way. Read must keep working after the
	// sink is closed, while a PerEntry fault is on, and after any fault is
	// healed (the suite does not read while another fault is on).
	Read(ctx context.Context, n int) ([]Message, error)

	// Faults lists the faults the harness can inject (none is fine: the
	// cases that need one are skipped, saying so). A harness should offer
	// every fault its broker makes easy to cause; see [Fault]. Every
	// harness the NewHarness makes must return the same faults, in the
	// same order (the suite runs one subtest per fault, each with a
	// harness of its own).
	Faults() []Fault
}

// Message is one message the broker holds for the destination, as a
// consumer sees it.
type Message struct {
	// ID is the entry ID the message carries, wherever the sink puts it
	// (an ID header, the broker's message ID); empty if it carries none.
	ID string
	// Key is the entry key the message carries (a record key, a routing
	// key, a header); empty if none.
	Key string
	// Payload is the message body.
	Payload []byte
	// Headers are every header the message carries, including the sink's
	// own (an ID or attempt header). The suite checks that each of the
	// entry's headers is among them with its value.
	Headers map[string]string
}

// Fault is a failure the harness can cause, and what the sink must report
// for the entries it hits.
type Fault struct {
	// Name says what the fault is ("produce error NOT_LEADER", "no
	// stream for the subject"); the suite runs one subtest per fault,
	// named after it.
	Name string

	// PerEntry faults hit the one entry Apply is given (Apply may change
	// the entry, such as making its payload too large, or arrange with the
	// broker that only this entry's message fails, by its ID). Entries of
	// other keys may fail with it (a broker that refuses a batch whole
	// fails its other messages too), but never permanently because of
	// it. Other faults hit the whole destination: Apply gets a nil entry.
	PerEntry bool

	// Permanent is the class the sink must report for the entries the
	// fault hits: permanent when true (backoff.ClassOf(err) ==
	// backoff.ClassPermanent, the relay parks the entry), retryable
	// (transient or semi-transient) when false.
	Permanent bool

	// Mentions are words a permanent error's text must contain, naming
	// what to configure or fix (an option, a limit, the destination).
	// Ignored when Permanent is false.
	Mentions []string

	// Stalls reports that while the fault is on, the broker acknowledges
	// nothing (a network partition, a paused server, requests held
	// unanswered): a Publish during it can only end by its context or the
	// sink's own timeout. What was sent during the stall may be written
	// when it heals (it was in flight) or never. The Cancel and
	// LandingBound cases need such a fault; Permanent must be false.
	Stalls bool

	// Apply turns the fault on and returns heal, which turns it off; heal
	// must be safe to call twice (the suite also calls it in cleanup).
	// For a PerEntry fault, e is the entry to break; the suite publishes
	// the entry's original, unchanged copy again after heal. For
	// others, e is nil. After heal, publishing the same entries again must
	// succeed, without the harness making a new sink (a sink must recover
	// on its own).
	Apply func(ctx context.Context, e *outbox.Entry) (heal func(context.Context) error, err error)
}
