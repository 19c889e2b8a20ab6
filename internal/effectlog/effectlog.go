// Package effectlog is what the consumer helpers' tests (natsinbox,
// amqpinbox, kafkainbox) share: a log of the effects an inbox handler
// committed on the in-memory store, the check that each entry was applied
// once, in key order, and what the janitor tests read (Meter, OldRecords).
package effectlog

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
)

// Effect is one applied message as the handler saw it.
type Effect struct {
	ID  string
	Key string
	Seq int64
}

// Log is a consumer's committed effects: Handler adds them in the Memory
// store's OnCommit, so only committed transactions count.
type Log struct {
	mu   sync.Mutex
	list []Effect
	cond chan struct{} // closed and replaced on every commit
}

// New returns an empty Log.
func New() *Log { return &Log{cond: make(chan struct{})} }

// Handler returns a handler recording each message's effect at commit. It
// fails a message whose Data dataOK refuses (the helper attached the wrong
// broker message), and one for which fail (when not nil) returns an error.
func (e *Log) Handler(dataOK func(any) bool, fail func(m inbox.Message) error) inbox.Handler[*inbox.MemoryTx] {
	return func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		if !dataOK(m.Data) {
			return fmt.Errorf("the message's Data is a %T, not the broker's message", m.Data)
		}
		if fail != nil {
			if err := fail(m); err != nil {
				return err
			}
		}
		tx.OnCommit(func() { e.Add(Effect{m.ID, m.Key, m.Seq}) })
		return nil
	}
}

// Add logs f.
func (e *Log) Add(f Effect) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, f)
	close(e.cond)
	e.cond = make(chan struct{})
}

// Snapshot returns the effects so far and a channel closed at the next.
func (e *Log) Snapshot() ([]Effect, chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Effect(nil), e.list...), e.cond
}

// Wait waits until at least n effects committed, failing the test after a
// generous deadline.
func (e *Log) Wait(t testing.TB, n int) []Effect {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		list, changed := e.Snapshot()
		if len(list) >= n {
			return list
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d effects committed after a minute, want %d", len(list), n)
		}
	}
}

// CheckOnce fails the test unless got holds each of want's entries once,
// and with inOrder each key's in sequence order 1, 2, 3, ...
func CheckOnce(t testing.TB, got []Effect, want []outbox.Entry, inOrder bool) {
	t.Helper()
	require.Len(t, got, len(want), "each entry once")
	ids := map[string]bool{}
	for _, e := range want {
		ids[e.ID] = true
	}
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, f := range got {
		require.True(t, ids[f.ID], "effect of an unknown ID %s", f.ID)
		require.False(t, seen[f.ID], "entry %s applied twice", f.ID)
		seen[f.ID] = true
		if inOrder {
			require.Equal(t, last[f.Key]+1, f.Seq, "key %s out of order", f.Key)
		}
		last[f.Key] = f.Seq
	}
}
