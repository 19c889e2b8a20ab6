package sinksuite_test

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox/conformance/sinksuite"
	"github.com/outboxrelay/outbox/internal/brokentest"
)

// The suite proves itself on deliberately broken sinks: each variant is
// the memory sink (memory_test.go) with one contract broken.
// TestSuiteRejectsBrokenSinks runs the cases that pin the broken contract
// against each variant in a subprocess (Run takes a *testing.T, so a
// failing run needs a test binary of its own) and asserts that each of
// them fails.

// brokenEnv names the variant a TestBrokenChild subprocess runs.
const brokenEnv = "OUTBOX_SINKSUITE_BROKEN"

// variant is one deliberately broken sink.
type variant struct {
	name string
	// breaks says which contract is broken, and how.
	breaks string
	// caughtBy lists the subtests ("Area/Case" or
	// "Area/Case/Fault") that must fail on it.
	caughtBy []string
}

var variants = []variant{
	{"drops-every-7th", "reports every 7th entry published without writing it",
		[]string{"Publish/NilMeansReadable", "KeyOrder/InterleavedKeys", "Close/KeepsPublished"}},
	{"loses-headers", "writes no header of the entry",
		[]string{"Publish/RoundTrip"}},
	{"loses-traceparent", "drops the traceparent header",
		[]string{"Publish/RoundTrip"}},
	{"writes-twice", "writes every message twice",
		[]string{"Publish/RoundTrip", "Publish/NilMeansReadable", "Publish/Concurrent", "Close/KeepsPublished"}},
	{"short-errors", "returns one error too few",
		[]string{"Publish/OneErrorPerEntry", "Publish/RoundTrip"}},
	{"empty-writes", "writes a message for an empty call",
		[]string{"Publish/EmptyInput"}},
	{"retains-input", "stores the caller's payload and headers instead of copies",
		[]string{"Publish/InputNotRetained"}},
	{"reorders-key", "writes a call's entries in reverse order while reporting KeepsKeyOrder",
		[]string{"KeyOrder/InterleavedKeys", "KeyOrder/ConcurrentCalls", "Publish/RoundTrip"}},
	{"keeps-key-after-failure", "goes on writing a key's entries after one failed with a retryable error",
		[]string{"KeyOrder/FailureMidKey/TransientErrorForOneEntry"}},
	{"reports-later-published", "reports a key's entries after a retryable failure published, without writing them",
		[]string{"KeyOrder/FailureMidKey/TransientErrorForOneEntry"}},
	{"permanent-as-transient", "reports permanent broker errors as transient",
		[]string{"Errors/Classified/MessageOverSizeLimit", "Errors/Classified/NoDestination", "KeyOrder/FailureMidKey/MessageOverSizeLimit"}},
	{"transient-as-permanent", "reports retryable broker errors as permanent",
		[]string{"Errors/Classified/BrokerDown", "Errors/Classified/TransientErrorForOneEntry", "KeyOrder/FailureMidKey/TransientErrorForOneEntry"}},
	{"no-mention", "a permanent error does not say what to configure",
		[]string{"Errors/Classified/MessageOverSizeLimit", "Errors/Classified/NoDestination"}},
	{"sticky-failure", "keeps failing after a fault is healed",
		[]string{"Errors/Classified/BrokerDown", "Errors/Classified/NoDestination"}},
	{"ignores-ctx", "waits for a stalled broker whatever its context says",
		[]string{"Cancel/CancelledWhileStalled", "Errors/Classified/Stalled"}},
	{"cancel-permanent", "fails entries permanently when the context is cancelled",
		[]string{"Cancel/CancelledBeforeCall", "Cancel/CancelledWhileStalled"}},
	{"lands-late", "writes a message it gave up on after the broker heals, later than its LandingBound (0)",
		[]string{"LandingBound/NothingLandsLater"}},
	{"writes-after-close", "Publish after Close writes and reports success",
		[]string{"Close/PublishAfterClose"}},
	{"panics-after-close", "Publish after Close panics",
		[]string{"Close/PublishAfterClose", "Close/WhilePublishing"}},
	{"close-twice-panics", "a second Close panics",
		[]string{"Close/Twice"}},
	{"close-drops-buffered", "reports entries published while they wait in a buffer that Close drops",
		[]string{"Close/KeepsPublished"}},
}

// TestBrokenChild runs the suite against the variant named by
// OUTBOX_SINKSUITE_BROKEN. It is the subprocess of
// TestSuiteRejectsBrokenSinks and expected to fail.
func TestBrokenChild(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("runs only as a subprocess of TestSuiteRejectsBrokenSinks, with " + brokenEnv + " set")
	}
	sinksuite.Run(t, newMemHarness(name))
}

func TestSuiteRejectsBrokenSinks(t *testing.T) {
	exe := childExe(t)
	vs := make([]brokentest.Variant, len(variants))
	for i, v := range variants {
		vs[i] = brokentest.Variant{Name: v.name, Breaks: v.breaks, CaughtBy: v.caughtBy}
	}
	children(exe).Reject(t, "broken sink → the subtests of sinksuite.Run that pin its contract, as they failed on it", vs)
}

// children runs TestBrokenChild in subprocesses of exe.
func children(exe string) brokentest.Children {
	return brokentest.Children{Exe: exe, Test: "TestBrokenChild", Env: brokenEnv, Slots: 4 * runtime.NumCPU()}
}

// TestReferenceChild runs the child's command line on the reference sink
// (no variant): it must pass, so a variant's failures come from what it
// breaks, not from the way the children are run.
func TestReferenceChild(t *testing.T) {
	exe := childExe(t)
	var all []string
	for _, v := range variants {
		all = append(all, v.caughtBy...)
	}
	out, err := children(exe).Run(t.Context(), "none", all)
	if err != nil {
		t.Fatalf("the suite failed on the reference sink run as a child: %v\n%s", err, brokentest.Tail(string(out), 40))
	}
	if !strings.Contains(string(out), "--- PASS: TestBrokenChild/") {
		t.Fatalf("the child ran no case:\n%s", brokentest.Tail(string(out), 40))
	}
}

// childExe returns the test binary for the children, skipping t inside a
// child and marking it parallel.
func childExe(t *testing.T) string {
	t.Helper()
	if os.Getenv(brokenEnv) != "" {
		t.Skip("inside a TestBrokenChild subprocess")
	}
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	return exe
}
