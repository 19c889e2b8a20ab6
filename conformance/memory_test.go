package conformance_test

import (
	"context"
	"testing"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/conformance"
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
