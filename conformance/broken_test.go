package conformance_test

import (
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/conformance"
	"github.com/outboxrelay/outbox/internal/brokentest"
)

// The suite proves itself on deliberately broken backends: each variant
// wraps the in-memory reference backend and breaks one contract from the
// outside. TestSuiteRejectsBrokenBackends runs the suite's cases that pin
// the broken contract against each variant in a subprocess (Run takes a
// *testing.T, so a failing run must happen in a test binary of its own) and
// asserts that every one of them fails.
//
// This file holds what the variants share: the variant type, the broken
// wrapper and its state, the harness and the tests that run the variants.
// The variants themselves, with the wrapper methods they break, are split
// by area into broken_<area>_test.go (append, fetch, corrupt, outcome,
// holdback, lease, fencing, lifecycle, notifier, canceler, inspector,
// looker, partition_inspector, membership, reopen, move).

// brokenEnv names the variant a TestBrokenChild subprocess runs.
const brokenEnv = "OUTBOX_CONFORMANCE_BROKEN"

// variant is one deliberately broken backend.
type variant struct {
	name string
	// breaks says which contract is broken, and how.
	breaks string
	// caughtBy lists subtests that must fail on it.
	caughtBy []string
}

// variants are every broken variant, gathered from the area files.
var variants = slices.Concat(
	lifecycleVariants,
	appendVariants,
	fetchVariants,
	corruptVariants,
	outcomeVariants,
	holdBackVariants,
	leaseVariants,
	fencingVariants,
	notifierVariants,
	cancelerVariants,
	inspectorVariants,
	lookerVariants,
	partitionInspectorVariants,
	membershipVariants,
	reopenVariants,
	moveVariants,
	historyVariants,
	deferredVariants,
	listerVariants,
	collationVariants,
	pauserVariants,
	memberListerVariants,
)

// broken wraps a memory backend and breaks the contract of its variant.
// The optional interfaces are promoted from the embedded backend.
type broken struct {
	*memory.Backend
	variant string

	mu        sync.Mutex
	newest    map[int]outbox.Lease          // latest lease granted per partition
	fakes     map[string]bool               // "partition/owner" of fake leases
	appending int                           // AppendInTx calls in progress
	seen      map[string]bool               // IDs appended so far
	sent      map[string]bool               // sent-ids-remembered: IDs marked sent
	keys      map[string]string             // ID -> key of fetched entries
	failing   map[string]keptFailure        // hold-back-ignored: failures kept by the wrapper
	attempts  map[string]int                // hold-back-ignored: attempts kept by the wrapper
	subs      map[chan int]struct{}         // notifies-on-append subscribers
	given     map[string][]int              // heartbeat-*: partitions given per owner
	shown     map[int]outbox.Lease          // partition-stats-expired-lease-shown: last lease granted, until released
	fetched   map[string]outbox.Entry       // lookup-finds-sent: entries fetched so far
	claimed   map[string]bool               // lookup-misses-claimed: IDs fetched and not finished
	lent      map[string]outbox.EntryInfo   // lookup-shares-payload: the first Lookup of each ID
	released  map[string]bool               // sent-released-come-back: IDs released so far
	corrupt   map[string]string             // IDs damaged through the brokenHarness's Corrupter, with the way
	overlay   map[string]outbox.Entry       // hold-back-first-failure-only: Attempts and LastError of re-appended entries
	fetchedBy map[string]outbox.Lease       // cancel-misses-returned: the lease that fetched each unfinished ID
	returned  map[string]bool               // cancel-misses-returned: IDs released by the relay
	freed     map[outbox.Lease]bool         // cancel-misses-returned: leases released (Expires cleared)
	strays    map[int][]outbox.Entry        // release-into-lease-partition: entries queued in a partition not theirs
	retrying  map[string]bool               // stats-due-ignores-retry-time: IDs failed with a retry in the future
	ghosts    outbox.Stats                  // stats-*: counts the variant keeps after they should be gone
	failingID map[string]string             // hold-back-whole-key, empty-key-held-back: failing IDs and their keys
	parkedKey map[string]string             // park-keeps-holding-back: parked IDs and their keys
	claimedBy map[string]outbox.Lease       // claims-stay-with-ended-lease, stats-claimed-not-pending: unfinished claims
	alias     map[outbox.Lease]outbox.Lease // versions-restart-after-release: reported lease -> real lease
	releases  map[int]int64                 // versions-restart-after-release: releases per partition
	inputs    map[string]outbox.Entry       // input-retained: the caller's entries
	genSeq    int                           // generated-ids-not-uuidv7: the last sequence number
	cancelled map[string]outbox.Entry       // cancelled-claim-revived: claimed entries cancelled
	requeued  map[string]bool               // requeue-keeps-order: IDs requeued
	handed    map[string]outbox.Entry       // fetch-shares-payload: the first fetch of each ID
	hold      outbox.HoldState              // hold-ignored: the hold fetches do not see
	sealed    bool                          // seal-ignored, seal-checked-at-append-only: the seal commits do not see
	op        *opState                      // the operator variants (broken_operate_test.go)
}

func newBroken(variant string, b *memory.Backend) *broken {
	return &broken{
		Backend: b, variant: variant,
		newest: map[int]outbox.Lease{}, fakes: map[string]bool{}, seen: map[string]bool{}, sent: map[string]bool{},
		keys: map[string]string{}, failing: map[string]keptFailure{}, attempts: map[string]int{},
		subs: map[chan int]struct{}{}, given: map[string][]int{},
		shown: map[int]outbox.Lease{}, fetched: map[string]outbox.Entry{}, claimed: map[string]bool{}, lent: map[string]outbox.EntryInfo{},
		released: map[string]bool{}, corrupt: map[string]string{},
		overlay: map[string]outbox.Entry{}, fetchedBy: map[string]outbox.Lease{}, returned: map[string]bool{}, freed: map[outbox.Lease]bool{},
		strays: map[int][]outbox.Entry{}, retrying: map[string]bool{}, failingID: map[string]string{}, handed: map[string]outbox.Entry{},
		parkedKey: map[string]string{}, claimedBy: map[string]outbox.Lease{}, alias: map[outbox.Lease]outbox.Lease{}, releases: map[int]int64{},
		inputs: map[string]outbox.Entry{}, cancelled: map[string]outbox.Entry{}, requeued: map[string]bool{},
		op: newOpState(),
	}
}

// TestBrokenChild runs the suite against the variant named by
// OUTBOX_CONFORMANCE_BROKEN. It is the subprocess of
// TestSuiteRejectsBrokenBackends and expected to fail; TestSimulatedReopen
// runs it with the variant "none", which breaks nothing.
func TestBrokenChild(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("runs only as a subprocess of TestSuiteRejectsBrokenBackends or TestSimulatedReopen, with " + brokenEnv + " set")
	}
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[*memory.Tx] {
		b := memory.New(memory.Options{Partitions: cfg.Partitions})
		t.Cleanup(func() { _ = b.Close() })
		w := newBroken(name, b)
		return brokenHarness{
			reopenHarness: reopenHarness{memoryHarness: memoryHarness{b: w, begin: b.Begin}, mem: b},
			variant:       name,
			w:             w,
		}
	})
}

// brokenHarness is the reopenHarness of a broken variant: the reopen-*
// variants break its Reopen (the constructor a backend that stores its
// partition count would have).
type brokenHarness struct {
	reopenHarness
	variant string
	w       *broken
}

func TestSuiteRejectsBrokenBackends(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("inside a TestBrokenChild subprocess")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	// Each child runs only the subtests that must catch its variant, so
	// the whole check costs a few cases per variant instead of the whole
	// suite per variant (which kept both cores of a CI machine busy while
	// other packages ran their timing-sensitive tests). The children
	// mostly wait (leases, retries, watchdogs), so run many at once, but
	// not all: with 180 variants, starting every child together starved
	// the timing-sensitive ones (a relay's retry, a transaction racing a
	// seal) of CPU on a loaded machine, so they were missed.
	children := brokentest.Children{Exe: exe, Test: "TestBrokenChild", Env: brokenEnv, Slots: 8 * runtime.NumCPU()}
	children.Reject(t, "broken variant → the subtests of conformance.Run that pin its contract, as they failed on it", toCheck(variants))
}

// toCheck converts the variants for brokentest.
func toCheck(vs []variant) []brokentest.Variant {
	out := make([]brokentest.Variant, len(vs))
	for i, v := range vs {
		out[i] = brokentest.Variant{Name: v.name, Breaks: v.breaks, CaughtBy: v.caughtBy}
	}
	return out
}
