package inbox_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/outboxrelay/outbox/inbox"
)

// TestMemoryOnCommitInCommitOrder: a transaction's OnCommit functions run
// before the next transaction begins, so two handlers' effects take place
// in the order their transactions committed (a key's effects in order),
// never interleaved.
func TestMemoryOnCommitInCommitOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := inbox.NewMemory()
		ib := newInbox(t, s, inbox.Options{})
		var (
			mu      sync.Mutex
			effects []string
			gate    = make(chan struct{})
		)
		effect := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
			tx.OnCommit(func() {
				if m.ID == "k1" {
					<-gate // the first effect is slow
				}
				mu.Lock()
				defer mu.Unlock()
				effects = append(effects, m.ID)
			})
			return nil
		}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = ib.Handle(t.Context(), inbox.Message{ID: "k1", Key: "k", Seq: 1}, effect) })
		synctest.Wait() // k1 committed its records and runs its effect
		wg.Go(func() { _, _ = ib.Handle(t.Context(), inbox.Message{ID: "k2", Key: "k", Seq: 2}, effect) })
		synctest.Wait() // k2 waits for the transaction slot
		mu.Lock()
		early := slices.Clone(effects)
		mu.Unlock()
		if len(early) != 0 {
			t.Errorf("effects %v while k1's effect is still running, want none: k2's transaction began before k1's effects took place", early)
		}
		close(gate)
		wg.Wait()
		if !slices.Equal(effects, []string{"k1", "k2"}) {
			t.Errorf("effects %v, want [k1 k2]: in commit order", effects)
		}
	})
}

// TestMemoryOnCommitPanicFreesTheStore: a panicking OnCommit function
// does not leave the store's transaction slot taken.
func TestMemoryOnCommitPanicFreesTheStore(t *testing.T) {
	t.Parallel()
	s := inbox.NewMemory()
	tx, err := s.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tx.OnCommit(func() { panic("effect failed") })
	func() {
		defer func() { _ = recover() }()
		_ = tx.Commit()
	}()
	if err := s.InTx(t.Context(), func(context.Context, *inbox.MemoryTx) error { return nil }); err != nil {
		t.Fatalf("InTx after a panicking OnCommit = %v", err)
	}
	if err := tx.Commit(); err == nil {
		t.Error("a second Commit of a committed transaction = nil, want ErrTxDone")
	}
}
