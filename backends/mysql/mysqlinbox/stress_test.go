package mysqlinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
)

// TestOverlappingBatchesApplyOnce: consumers handle batches that overlap
// (redeliveries of parts of other consumers' batches, in a shuffled order,
// several messages per key) at once; every message's effect commits
// exactly once, and each key's number ends at its highest. Batches that
// are partly new and partly applied take Record's second statement, and
// the conflicts between them (lock waits, deadlocks) are retried.
func TestOverlappingBatchesApplyOnce(t *testing.T) {
	t.Parallel()
	for _, lv := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelReadCommitted} {
		t.Run(strings.ReplaceAll(lv.String(), " ", ""), func(t *testing.T) {
			t.Parallel()
			overlappingBatches(t, lv)
		})
	}
}

func overlappingBatches(t *testing.T, lv sql.IsolationLevel) {
	s, db := newStore(t, mysqlinbox.Options{Isolation: lv})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // the watchdog
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (id VARCHAR(64) NOT NULL, k VARCHAR(64) NOT NULL, seq BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cs := &conflictCounter{Store: s}
	ib, err := inbox.New[*sql.Tx](cs, inbox.Options{MaxAttempts: 100, Logger: slog.New(slog.DiscardHandler), MeterProvider: noop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey, consumers, batch = 8, 10, 4, 12
	var msgs []inbox.Message
	for k := range keys {
		for n := 1; n <= perKey; n++ {
			msgs = append(msgs, inbox.Message{ID: fmt.Sprintf("m-%d-%02d", k, n), Key: fmt.Sprint("key", k), Seq: int64(n)})
		}
	}
	effect := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (id, k, seq) VALUES (?, ?, ?)", m.ID, m.Key, m.Seq)
		return err
	}
	// Every third message is applied first, on its own: every later batch
	// holds some of those, so the first consumer to reach a message gets
	// a batch that is partly new and partly applied.
	for i := 0; i < len(msgs); i += 3 {
		if _, err := ib.Handle(ctx, msgs[i], effect); err != nil {
			t.Fatal(err)
		}
	}
	var mixed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	for c := range consumers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), 7))
			// Each consumer goes through every message once, in batches
			// that keep each key's messages in order, shuffled across
			// keys: the consumers' batches overlap everywhere.
			order := make([]inbox.Message, 0, len(msgs))
			next := make([]int, keys)
			for len(order) < len(msgs) {
				k := rnd.IntN(keys)
				if next[k] < perKey {
					order = append(order, msgs[k*perKey+next[k]])
					next[k]++
				}
			}
			for i := 0; i < len(order); i += batch {
				rs, err := ib.HandleBatch(ctx, order[i:min(i+batch, len(order))], effect)
				if err != nil {
					errs <- fmt.Errorf("consumer %d, batch at %d: %w", c, i, err)
					return
				}
				outcomes := map[inbox.Outcome]bool{}
				for _, r := range rs {
					outcomes[r.Outcome] = true
				}
				if len(outcomes) == 2 {
					mixed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d batches partly new, partly applied; %d conflicts retried", mixed.Load(), cs.n.Load())
	if mixed.Load() == 0 {
		t.Fatal("no batch was partly new and partly applied: the case this test is for did not happen")
	}
	var total, distinct int
	if err := db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT id) FROM effects").Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	if total != len(msgs) || distinct != len(msgs) {
		t.Fatalf("effects: %d rows of %d IDs; want each of the %d messages exactly once", total, distinct, len(msgs))
	}
	var probe []string
	for k := range keys {
		probe = append(probe, fmt.Sprint("key", k))
	}
	err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		got, err := s.KeySeqs(ctx, tx, probe)
		for _, k := range probe {
			if err == nil && got[k] != perKey {
				t.Errorf("KeySeqs[%s] = %d, want %d", k, got[k], perKey)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// conflictCounter counts the retryable conflicts the inbox met.
type conflictCounter struct {
	*mysqlinbox.Store
	n atomic.Int64
}

func (c *conflictCounter) Retryable(err error) bool {
	r := c.Store.Retryable(err)
	if r {
		c.n.Add(1)
	}
	return r
}
