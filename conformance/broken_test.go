package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/conformance"
)

// The suite proves itself on deliberately broken backends: each variant
// below wraps the in-memory reference backend and breaks one contract from
// the outside. TestSuiteRejectsBrokenBackends runs the suite's cases that
// pin the broken contract against each variant in a subprocess (Run takes a
// *testing.T, so a failing run must happen in a test binary of its own) and
// asserts that every one of them fails.

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

var variants = []variant{
	{"ignores-not-before", "AppendInTx clears NotBefore, so scheduled entries are due at once", []string{"Fetch/NotBeforeHonoured"}},
	{"rollback-leaks", "AppendInTx appends in a transaction of its own and commits it, ignoring the caller's rollback", []string{"Append/RollbackLeavesNothing"}},
	{"loses-concurrent-append", "AppendInTx drops the entries when another append is in progress", []string{"Concurrency/ParallelAppendsAllVisibleInOrder"}},
	{"append-not-idempotent", "AppendInTx gives a repeated ID a new ID, so it becomes a duplicate", []string{"Append/IdempotentAcrossTxs"}},
	{"fifo-reversed", "FindPendingBatch returns each batch in reverse order", []string{"Fetch/FIFOWithinPartition", "Fetch/FIFOOneLargeTxSmallBatches"}},
	{"batch-limit-ignored", "FindPendingBatch fetches twice the limit", []string{"Fetch/BatchLimitHonoured"}},
	{"double-claim", "AcquireLease never reports ErrLeaseHeld: a second owner gets a fake lease that maps to the holder's", []string{"Lease/ExclusiveAcrossOwners", "Claims/NotHandedToAnotherOwnerWhileLeaseLive"}},
	{"stale-fetch-allowed", "FindPendingBatch with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleFindPendingBatch"}},
	{"mark-sent-unfenced", "MarkSent with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleMarkSent"}},
	{"mark-failed-unfenced", "MarkFailed with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleMarkFailed"}},
	{"release-lease-unfenced", "ReleaseLease frees the partition whoever holds it", []string{"Lease/ReleaseByOtherOwnerOrVersionIsNoop", "Fencing/StaleReleaseLease"}},
	{"stale-renew-succeeds", "RenewLease of a lost lease reports success", []string{"Fencing/StaleRenewLease", "Lease/RenewAfterExpiryFails"}},
	{"hold-back-ignored", "a failed keyed entry is tracked by the wrapper and released, so it no longer holds back its key", []string{"HoldBack/FailingEntryHoldsBackOnlyItsKey"}},
	{"release-counts-attempt", "Release records a failed attempt (MarkFailed, retry now) instead of returning entries unchanged", []string{"Claims/ReleaseReturnsEntriesUnchanged"}},
	{"close-ignored", "Close does nothing, so every method keeps working", []string{"Lifecycle/EveryMethodFailsAfterClose"}},
	{"ignores-context", "every call runs with context.WithoutCancel", []string{"Lifecycle/CancelledContextChangesNothing"}},
	{"notifies-on-append", "Notifications also fire when AppendInTx is called, before (and without) a commit", []string{"Notifier/ArrivesAfterCommit", "Notifier/NoneForRollback"}},
	{"cancel-unknown-succeeds", "Cancel of an ID that does not exist returns nil", []string{"Canceler/CancelsPendingAndScheduled"}},
	{"repeated-id-last-wins", "AppendInTx keeps the last occurrence of an ID repeated in one call", []string{"Append/RepeatedIDInOneCallFirstWins"}},
	{"sent-ids-remembered", "AppendInTx drops entries whose ID was marked sent before", []string{"Append/SentIDAppendsAgain"}},
	{"expired-lease-reacquired", "a fenced call with an expired lease nobody took over re-acquires the partition and goes ahead", []string{"Fencing/ExpiredFindPendingBatch", "Fencing/ExpiredMarkSent", "Fencing/ExpiredMarkFailed", "Fencing/ExpiredRelease"}},
	{"closed-empty-inputs-ok", "calls with empty inputs return nil without checking Close", []string{"Lifecycle/EmptyInputsFailAfterClose"}},
	{"renew-nonpositive-drops-lease", "RenewLease with ttl <= 0 releases the lease before reporting ErrInvalidArgument", []string{"Arguments/RenewLeaseRejectsNonPositiveTTL"}},
}

// broken wraps a memory backend and breaks the contract of its variant.
// The optional interfaces are promoted from the embedded backend.
type broken struct {
	*memory.Backend
	variant string

	mu        sync.Mutex
	newest    map[int]outbox.Lease       // latest lease granted per partition
	fakes     map[string]bool            // "partition/owner" of fake leases
	appending int                        // AppendInTx calls in progress
	seen      map[string]bool            // IDs appended so far
	sent      map[string]bool            // sent-ids-remembered: IDs marked sent
	keys      map[string]string          // ID -> key of fetched entries
	failing   map[string]outbox.Failure  // hold-back-ignored: failures kept by the wrapper
	attempts  map[string]int             // hold-back-ignored: attempts kept by the wrapper
	subs      map[chan struct{}]struct{} // notifies-on-append subscribers
}

func newBroken(variant string, b *memory.Backend) *broken {
	return &broken{
		Backend: b, variant: variant,
		newest: map[int]outbox.Lease{}, fakes: map[string]bool{}, seen: map[string]bool{}, sent: map[string]bool{},
		keys: map[string]string{}, failing: map[string]outbox.Failure{}, attempts: map[string]int{},
		subs: map[chan struct{}]struct{}{},
	}
}

// current returns the newest lease of l's partition, or l.
func (w *broken) current(l outbox.Lease) outbox.Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n, ok := w.newest[l.Partition]; ok {
		return n
	}
	return l
}

// real maps a fake lease (double-claim) to the holder's lease.
func (w *broken) real(l outbox.Lease) outbox.Lease {
	if w.variant != "double-claim" {
		return l
	}
	w.mu.Lock()
	fake := w.fakes[fmt.Sprintf("%d/%s", l.Partition, l.Owner)]
	w.mu.Unlock()
	if fake {
		return w.current(l)
	}
	return l
}

func (w *broken) ctx(ctx context.Context) context.Context {
	if w.variant == "ignores-context" {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// revive is the expired-lease-reacquired variant: when a fenced call
// failed with ErrLeaseLost and nobody else holds the partition, it
// re-acquires the partition for the lease's owner and returns the new
// lease to retry with.
func (w *broken) revive(ctx context.Context, lease outbox.Lease, err error) (outbox.Lease, bool) {
	if w.variant != "expired-lease-reacquired" || !errors.Is(err, outbox.ErrLeaseLost) {
		return lease, false
	}
	l, aerr := w.Backend.AcquireLease(ctx, lease.Partition, lease.Owner, time.Minute)
	return l, aerr == nil
}

// emptyOK is the closed-empty-inputs-ok variant: calls with nothing to do
// return nil before the backend sees them.
func (w *broken) emptyOK(n int) bool {
	return w.variant == "closed-empty-inputs-ok" && n == 0
}

func (w *broken) AppendInTx(ctx context.Context, tx *memory.Tx, entries ...outbox.Entry) error {
	ctx = w.ctx(ctx)
	if w.emptyOK(len(entries)) {
		return nil
	}
	entries = slices.Clone(entries)
	switch w.variant {
	case "repeated-id-last-wins":
		last := map[string]int{}
		for i, e := range entries {
			last[e.ID] = i
		}
		var keep []outbox.Entry
		for i, e := range entries {
			if e.ID == "" || last[e.ID] == i {
				keep = append(keep, e)
			}
		}
		entries = keep
	case "sent-ids-remembered":
		w.mu.Lock()
		entries = slices.DeleteFunc(entries, func(e outbox.Entry) bool { return w.sent[e.ID] })
		w.mu.Unlock()
	case "ignores-not-before":
		for i := range entries {
			entries[i].NotBefore = time.Time{}
		}
	case "rollback-leaks":
		own := w.Backend.Begin()
		if err := w.Backend.AppendInTx(ctx, own, entries...); err != nil {
			return err
		}
		return own.Commit()
	case "loses-concurrent-append":
		w.mu.Lock()
		busy := w.appending > 0
		w.appending++
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			w.appending--
			w.mu.Unlock()
		}()
		if busy {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	case "append-not-idempotent":
		w.mu.Lock()
		for i := range entries {
			if entries[i].ID != "" && w.seen[entries[i].ID] {
				entries[i].ID = outbox.NewID()
			}
			w.seen[entries[i].ID] = true
		}
		w.mu.Unlock()
	case "notifies-on-append":
		w.mu.Lock()
		for ch := range w.subs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		w.mu.Unlock()
	}
	return w.Backend.AppendInTx(ctx, tx, entries...)
}

func (w *broken) AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	l, err := w.Backend.AcquireLease(w.ctx(ctx), partition, owner, ttl)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		if n, ok := w.newest[partition]; !ok || l.Version >= n.Version {
			w.newest[partition] = l
		}
		delete(w.fakes, fmt.Sprintf("%d/%s", partition, owner))
	}
	if w.variant == "double-claim" && errors.Is(err, outbox.ErrLeaseHeld) {
		n := w.newest[partition]
		w.fakes[fmt.Sprintf("%d/%s", partition, owner)] = true
		return outbox.Lease{Partition: partition, Owner: owner, Version: n.Version, Expires: n.Expires}, nil
	}
	return l, err
}

func (w *broken) RenewLease(ctx context.Context, lease outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if w.variant == "renew-nonpositive-drops-lease" && ttl <= 0 {
		_ = w.Backend.ReleaseLease(ctx, lease)
	}
	l, err := w.Backend.RenewLease(w.ctx(ctx), w.real(lease), ttl)
	if err == nil {
		w.mu.Lock()
		if n := w.newest[l.Partition]; n.Version == l.Version {
			w.newest[l.Partition] = l
		}
		w.mu.Unlock()
		l.Owner = lease.Owner
	}
	if w.variant == "stale-renew-succeeds" && errors.Is(err, outbox.ErrLeaseLost) {
		lease.Expires = time.Now().Add(ttl)
		return lease, nil
	}
	return l, err
}

func (w *broken) ReleaseLease(ctx context.Context, lease outbox.Lease) error {
	if w.variant == "release-lease-unfenced" {
		lease = w.current(lease)
	}
	return w.Backend.ReleaseLease(w.ctx(ctx), w.real(lease))
}

func (w *broken) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	ctx = w.ctx(ctx)
	lease = w.real(lease)
	switch w.variant {
	case "stale-fetch-allowed":
		lease = w.current(lease)
	case "batch-limit-ignored":
		if limit > 0 {
			limit *= 2
		}
	}
	batch, err := w.Backend.FindPendingBatch(ctx, lease, limit)
	if l, ok := w.revive(ctx, lease, err); ok {
		batch, err = w.Backend.FindPendingBatch(ctx, l, limit)
	}
	if err != nil {
		return batch, err
	}
	switch w.variant {
	case "fifo-reversed":
		slices.Reverse(batch)
	case "hold-back-ignored":
		w.mu.Lock()
		var notDue []string
		out := batch[:0]
		for _, e := range batch {
			w.keys[e.ID] = e.Key
			if f, ok := w.failing[e.ID]; ok {
				if time.Now().Before(f.RetryAt) {
					notDue = append(notDue, e.ID)
					continue
				}
				e.Attempts, e.LastError = w.attempts[e.ID], f.Error
			}
			out = append(out, e)
		}
		w.mu.Unlock()
		batch = out
		if len(notDue) > 0 {
			if err := w.Backend.Release(ctx, lease, notDue); err != nil {
				return nil, err
			}
		}
	}
	return batch, nil
}

func (w *broken) MarkSent(ctx context.Context, lease outbox.Lease, ids []string) error {
	if w.variant == "mark-sent-unfenced" {
		lease = w.current(lease)
	}
	if w.variant == "hold-back-ignored" {
		w.mu.Lock()
		for _, id := range ids {
			delete(w.failing, id)
		}
		w.mu.Unlock()
	}
	if w.emptyOK(len(ids)) {
		return nil
	}
	err := w.Backend.MarkSent(w.ctx(ctx), w.real(lease), ids)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.MarkSent(ctx, l, ids)
	}
	if err == nil && w.variant == "sent-ids-remembered" {
		w.mu.Lock()
		for _, id := range ids {
			w.sent[id] = true
		}
		w.mu.Unlock()
	}
	return err
}

func (w *broken) MarkFailed(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) error {
	ctx = w.ctx(ctx)
	lease = w.real(lease)
	switch w.variant {
	case "mark-failed-unfenced":
		lease = w.current(lease)
	case "hold-back-ignored":
		var pass []outbox.Failure
		var release []string
		w.mu.Lock()
		for _, f := range failures {
			if key := w.keys[f.ID]; key != "" && !f.Park {
				w.failing[f.ID] = f
				w.attempts[f.ID]++
				release = append(release, f.ID)
				continue
			}
			pass = append(pass, f)
		}
		w.mu.Unlock()
		if len(release) > 0 {
			if err := w.Backend.Release(ctx, lease, release); err != nil {
				return err
			}
		}
		failures = pass
	}
	if w.emptyOK(len(failures)) {
		return nil
	}
	err := w.Backend.MarkFailed(ctx, lease, failures)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.MarkFailed(ctx, l, failures)
	}
	return err
}

func (w *broken) Release(ctx context.Context, lease outbox.Lease, ids []string) error {
	ctx = w.ctx(ctx)
	lease = w.real(lease)
	if w.variant == "release-counts-attempt" && len(ids) > 0 {
		fs := make([]outbox.Failure, len(ids))
		for i, id := range ids {
			fs[i] = outbox.Failure{ID: id, Error: "released", RetryAt: time.Now()}
		}
		return w.Backend.MarkFailed(ctx, lease, fs)
	}
	if w.emptyOK(len(ids)) {
		return nil
	}
	err := w.Backend.Release(ctx, lease, ids)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.Release(ctx, l, ids)
	}
	return err
}

func (w *broken) Close() error {
	if w.variant == "close-ignored" {
		return nil
	}
	return w.Backend.Close()
}

func (w *broken) Notifications(ctx context.Context) (<-chan struct{}, error) {
	real, err := w.Backend.Notifications(w.ctx(ctx))
	if err != nil || w.variant != "notifies-on-append" {
		return real, err
	}
	out := make(chan struct{}, 1)
	extra := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs[extra] = struct{}{}
	w.mu.Unlock()
	go func() {
		defer close(out)
		defer func() {
			w.mu.Lock()
			delete(w.subs, extra)
			w.mu.Unlock()
		}()
		for {
			select {
			case _, ok := <-real:
				if !ok {
					return
				}
			case <-extra:
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}

func (w *broken) Cancel(ctx context.Context, id string) error {
	err := w.Backend.Cancel(w.ctx(ctx), id)
	if w.variant == "cancel-unknown-succeeds" && errors.Is(err, outbox.ErrNotFound) {
		return nil
	}
	return err
}

func (w *broken) Stats(ctx context.Context) (outbox.Stats, error) {
	return w.Backend.Stats(w.ctx(ctx))
}

func (w *broken) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	return w.Backend.Parked(w.ctx(ctx), after, limit)
}

func (w *broken) Requeue(ctx context.Context, ids ...string) (int, error) {
	if w.emptyOK(len(ids)) {
		return 0, nil
	}
	return w.Backend.Requeue(w.ctx(ctx), ids...)
}

// TestBrokenChild runs the suite against the variant named by
// OUTBOX_CONFORMANCE_BROKEN. It is the subprocess of
// TestSuiteRejectsBrokenBackends and expected to fail.
func TestBrokenChild(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("runs only as a subprocess of TestSuiteRejectsBrokenBackends, with " + brokenEnv + " set")
	}
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[*memory.Tx] {
		b := memory.New(memory.Options{Partitions: cfg.Partitions})
		t.Cleanup(func() { _ = b.Close() })
		return memoryHarness{b: newBroken(name, b), begin: b.Begin}
	})
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
	// mostly wait (leases, retries, watchdogs), so run them all at once.
	type result struct {
		out    []byte
		err    error
		failed []string
	}
	results := make([]result, len(variants))
	var wg sync.WaitGroup
	for i, v := range variants {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe, "-test.run="+runPattern(v.caughtBy), "-test.v", "-test.count=1", "-test.parallel=16", "-test.timeout=150s")
			cmd.Env = append(os.Environ(), brokenEnv+"="+v.name)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			results[i] = result{out: out.Bytes(), err: err, failed: failingSubtests(out.Bytes())}
		})
	}
	wg.Wait()
	for i, v := range variants {
		r := results[i]
		t.Run(v.name, func(t *testing.T) {
			var exit *exec.ExitError
			if !errors.As(r.err, &exit) {
				t.Fatalf("the suite PASSED against variant %q (%s), or could not run (%v); it must fail.\n%s", v.name, v.breaks, r.err, tail(string(r.out), 40))
			}
			if len(r.failed) == 0 {
				t.Fatalf("the suite exited with %v against %q but no subtest failed (a crash or timeout?):\n%s", r.err, v.name, tail(string(r.out), 40))
			}
			for _, want := range v.caughtBy {
				if !slices.Contains(r.failed, want) {
					t.Errorf("variant %q (%s) was not caught by %s; failing subtests: %v", v.name, v.breaks, want, r.failed)
				}
			}
		})
	}
	var b strings.Builder
	b.WriteString("broken variant → the subtests of conformance.Run that pin its contract, as they failed on it\n")
	for i, v := range variants {
		fmt.Fprintf(&b, "  %-24s (%s)\n      → %s\n", v.name, v.breaks, strings.Join(results[i].failed, ", "))
	}
	t.Log(b.String())
}

// runPattern is the -test.run pattern of TestBrokenChild that selects the
// "Area/Case" subtests names (and, as -run matches level by level, other
// cases of those areas with one of those case names).
func runPattern(names []string) string {
	var areas, cases []string
	for _, n := range names {
		area, c, _ := strings.Cut(n, "/")
		if !slices.Contains(areas, area) {
			areas = append(areas, area)
		}
		if !slices.Contains(cases, c) {
			cases = append(cases, c)
		}
	}
	return "^TestBrokenChild$/^(" + strings.Join(areas, "|") + ")$/^(" + strings.Join(cases, "|") + ")$"
}

// failingSubtests returns the "Area/Case" names of the failing leaf
// subtests in go test -v output.
func failingSubtests(out []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "--- FAIL: TestBrokenChild/")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		if strings.Contains(name, "/") && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
