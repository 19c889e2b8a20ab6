package inboxtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/inbox/inboxtest"
)

// A store's test file runs the suite with a Harness that makes an
// isolated store per test (its own schema, database or key prefix,
// removed in t.Cleanup) and, optionally, backdates records for the
// retention cases:
//
//	func TestConformance(t *testing.T) {
//		inboxtest.Run(t, harness)
//	}
//
// Here the harness of inbox.Memory, and the first thing the suite checks
// with it: an ID is new once.
func ExampleHarness() {
	harness := inboxtest.Harness[*inbox.MemoryTx]{
		New: func(t *testing.T) inbox.Store[*inbox.MemoryTx] { return inbox.NewMemory() },
		Backdate: func(t *testing.T, s inbox.Store[*inbox.MemoryTx], d time.Duration, ids, keys []string) {
			s.(*inbox.Memory).Backdate(d, ids, keys)
		},
	}
	s := harness.New(nil)
	ctx := context.Background()
	for range 2 {
		err := s.InTx(ctx, func(ctx context.Context, tx *inbox.MemoryTx) error {
			fresh, err := s.Record(ctx, tx, []string{"entry-1", "entry-2", "entry-1"})
			fmt.Println(fresh)
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// [true true false]
	// [false false false]
}
