package conformance_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/conformance"
	"github.com/outboxrelay/outbox/internal/brokentest"
)

// memoryHarness runs the suite against the in-memory reference backend.
type memoryHarness struct {
	b outbox.Backend[*memory.Tx]
	// begin starts a transaction on the unwrapped backend.
	begin func() *memory.Tx
}

func (h memoryHarness) Backend() outbox.Backend[*memory.Tx] { return h.b }

func (h memoryHarness) Begin(context.Context) (*memory.Tx, error) { return h.begin(), nil }

func (h memoryHarness) Commit(_ context.Context, tx *memory.Tx) error { return tx.Commit() }

func (h memoryHarness) Rollback(_ context.Context, tx *memory.Tx) error { return tx.Rollback() }

func newMemoryHarness(_ *testing.T, cfg conformance.Config) conformance.Harness[*memory.Tx] {
	b := memory.New(memory.Options{Partitions: cfg.Partitions})
	return memoryHarness{b: b, begin: b.Begin}
}

func TestMemory(t *testing.T) {
	conformance.Run(t, newMemoryHarness)
}

// reopenHarness is a memoryHarness that also implements
// conformance.Reopener, for testing the suite itself. The memory backend
// keeps nothing beyond its instance, so it has no constructor that could
// read a stored partition count, and TestMemory runs without a Reopener
// (the suite skips the PartitionCount cases there). Reopen simulates such
// a constructor: it opens a second handle (a reopenedStore) on the same
// *memory.Backend and compares the configured count with the backend's
// count, as a backend that stores its count does when it opens an existing
// outbox. The PartitionCount cases run on it (TestSimulatedReopen, and the
// broken variants of it in broken_reopen_test.go) prove the cases, not the
// memory backend.
type reopenHarness struct {
	memoryHarness
	// mem is the backend under test, unwrapped.
	mem *memory.Backend
}

func (h reopenHarness) Reopen(ctx context.Context, partitions int) (outbox.Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stored := h.mem.Partitions()
	if partitions != 0 && partitions != stored {
		return nil, fmt.Errorf("memory (simulated reopen): %w", &outbox.PartitionMismatchError{Outbox: "memory", Configured: partitions, Stored: stored})
	}
	return &reopenedStore{Store: h.mem, partitions: stored}, nil
}

// reopenedStore is a second handle on a store: closing it closes the
// handle (every later call fails with ErrClosed), not the store, unless
// closeStore is set.
type reopenedStore struct {
	outbox.Store
	partitions int
	closeStore bool
	closed     atomic.Bool
}

var errHandleClosed = fmt.Errorf("memory (simulated reopen): store closed: %w", outbox.ErrClosed)

func (r *reopenedStore) Partitions() int { return r.partitions }

func (r *reopenedStore) Close() error {
	if r.closed.Swap(true) || !r.closeStore {
		return nil
	}
	return r.Store.Close()
}

func (r *reopenedStore) AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if r.closed.Load() {
		return outbox.Lease{}, errHandleClosed
	}
	return r.Store.AcquireLease(ctx, partition, owner, ttl)
}

func (r *reopenedStore) RenewLease(ctx context.Context, lease outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if r.closed.Load() {
		return outbox.Lease{}, errHandleClosed
	}
	return r.Store.RenewLease(ctx, lease, ttl)
}

func (r *reopenedStore) ReleaseLease(ctx context.Context, lease outbox.Lease) error {
	if r.closed.Load() {
		return errHandleClosed
	}
	return r.Store.ReleaseLease(ctx, lease)
}

func (r *reopenedStore) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	if r.closed.Load() {
		return nil, errHandleClosed
	}
	return r.Store.FindPendingBatch(ctx, lease, limit)
}

func (r *reopenedStore) MarkSent(ctx context.Context, lease outbox.Lease, ids []string) error {
	if r.closed.Load() {
		return errHandleClosed
	}
	return r.Store.MarkSent(ctx, lease, ids)
}

func (r *reopenedStore) MarkFailed(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) error {
	if r.closed.Load() {
		return errHandleClosed
	}
	return r.Store.MarkFailed(ctx, lease, failures)
}

func (r *reopenedStore) Release(ctx context.Context, lease outbox.Lease, ids []string) error {
	if r.closed.Load() {
		return errHandleClosed
	}
	return r.Store.Release(ctx, lease, ids)
}

// TestSimulatedReopen runs the PartitionCount cases on reopenHarness (in a
// TestBrokenChild subprocess with the variant "none", which breaks
// nothing) and requires every one of them to pass, not skip: they must not
// fail a backend that keeps the contract.
func TestSimulatedReopen(t *testing.T) {
	requirePassOnVariantNone(t, "PartitionCount", "the simulated reopen")
}

// TestSimulatedCorruption runs the Corrupt cases on brokenHarness's
// simulated decoder (in a TestBrokenChild subprocess with the variant
// "none") and requires every one of them to pass, not skip.
func TestSimulatedCorruption(t *testing.T) {
	requirePassOnVariantNone(t, "Corrupt", "the simulated decoder")
}

// requirePassOnVariantNone runs the cases of area in a TestBrokenChild
// subprocess with the variant "none" and fails t unless they all run and
// pass.
func requirePassOnVariantNone(t *testing.T, area, what string) {
	t.Helper()
	if os.Getenv(brokenEnv) != "" {
		t.Skip("inside a TestBrokenChild subprocess")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	children := brokentest.Children{Exe: exe, Test: "TestBrokenChild", Env: brokenEnv}
	out, err := children.Run(t.Context(), "none", []string{area})
	if err != nil {
		t.Fatalf("the %s cases failed on %s, which keeps the contract (%v):\n%s", area, what, err, brokentest.Tail(string(out), 60))
	}
	prefix := "TestBrokenChild/" + area + "/"
	if strings.Contains(string(out), "--- SKIP: "+prefix) || !strings.Contains(string(out), "--- PASS: "+prefix) {
		t.Fatalf("the %s cases must run and pass on %s, not skip:\n%s", area, what, brokentest.Tail(string(out), 60))
	}
}
