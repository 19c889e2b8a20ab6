package inboxtest_test

import (
	"testing"
	"time"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/inbox/inboxtest"
)

// memoryHarness runs the suite on inbox.Memory, with its Backdate or
// without (the suite then waits between old and new records).
func memoryHarness(backdate bool) inboxtest.Harness[*inbox.MemoryTx] {
	h := inboxtest.Harness[*inbox.MemoryTx]{
		New: func(t *testing.T) inbox.Store[*inbox.MemoryTx] { return inbox.NewMemory() },
	}
	if backdate {
		h.Backdate = func(t *testing.T, s inbox.Store[*inbox.MemoryTx], d time.Duration, ids, keys []string) {
			s.(*inbox.Memory).Backdate(d, ids, keys)
		}
	}
	return h
}

func TestMemory(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, memoryHarness(true))
}

func TestMemoryWithoutBackdate(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, memoryHarness(false))
}

// plainMemory hides inbox.Memory's optional interfaces (KeyRecorder,
// Finisher), so the suite's Inbox cases take the plain path.
type plainMemory struct{ inbox.Store[*inbox.MemoryTx] }

func TestMemoryPlain(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, inboxtest.Harness[*inbox.MemoryTx]{
		New: func(t *testing.T) inbox.Store[*inbox.MemoryTx] { return plainMemory{inbox.NewMemory()} },
		Backdate: func(t *testing.T, s inbox.Store[*inbox.MemoryTx], d time.Duration, ids, keys []string) {
			s.(plainMemory).Store.(*inbox.Memory).Backdate(d, ids, keys)
		},
	})
}
