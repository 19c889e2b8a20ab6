package inboxtest_test

import (
	"testing"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/inbox/inboxtest"
)

func TestMemory(t *testing.T) {
	inboxtest.Run(t, inboxtest.Harness[*inbox.MemoryTx]{
		New: func(t *testing.T) inbox.Store[*inbox.MemoryTx] { return inbox.NewMemory() },
	})
}
