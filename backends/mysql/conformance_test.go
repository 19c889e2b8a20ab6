package mysqloutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/conformance"
)

// harness is the conformance harness of one subtest: a database of its
// own (newDB), an outbox migrated in it and a Backend. Its transactions
// run through Backend.InTx, as an application's would, so that the
// Notifier cases see the in-process notifications InTx sends after a
// commit (and never for a rollback): Begin starts InTx in a goroutine
// and hands out its *sql.Tx; Commit and Rollback tell the function InTx
// runs to return nil or an error, and wait for InTx to finish.
type harness struct {
	b    *mysqloutbox.Backend
	db   *sql.DB
	opts mysqloutbox.Options

	mu   *sync.Mutex
	runs map[*sql.Tx]*txRun
}

// txRun is one transaction of InTx in flight.
type txRun struct {
	commit chan bool  // true: commit, false: roll back
	done   chan error // what InTx returned
}

// errHarnessRollback is what the function run by InTx returns to roll back.
var errHarnessRollback = errors.New("harness: rolled back")

// errHarnessRetry is the error of an InTx that wanted to run the
// transaction's function a second time.
var errHarnessRetry = errors.New("a retryable error; the harness cannot replay the suite's steps")

func (h harness) Backend() outbox.Backend[*sql.Tx] { return h.b }

func (h harness) Begin(ctx context.Context) (*sql.Tx, error) {
	r := &txRun{commit: make(chan bool, 1), done: make(chan error, 1)}
	got := make(chan *sql.Tx, 1)
	go func() {
		calls := 0
		r.done <- h.b.InTx(ctx, h.db, func(tx *sql.Tx) error {
			if calls++; calls > 1 { // InTx retries after a deadlock: the suite's steps cannot be replayed
				return fmt.Errorf("harness: InTx ran the transaction again after %w", errHarnessRetry)
			}
			got <- tx
			if <-r.commit {
				return nil
			}
			return errHarnessRollback
		})
	}()
	select {
	case tx := <-got:
		h.mu.Lock()
		h.runs[tx] = r
		h.mu.Unlock()
		return tx, nil
	case err := <-r.done: // InTx could not begin
		return nil, err
	}
}

func (h harness) finish(tx *sql.Tx, commit bool) error {
	h.mu.Lock()
	r, ok := h.runs[tx]
	delete(h.runs, tx)
	h.mu.Unlock()
	if !ok {
		return sql.ErrTxDone
	}
	r.commit <- commit
	return <-r.done
}

func (h harness) Commit(ctx context.Context, tx *sql.Tx) error { return h.finish(tx, true) }

func (h harness) Rollback(ctx context.Context, tx *sql.Tx) error {
	if err := h.finish(tx, false); !errors.Is(err, errHarnessRollback) {
		return err
	}
	return nil
}

// Reopen opens the harness's outbox again with mysqloutbox.New,
// configured with partitions (0: the stored count); the suite closes the
// store (conformance.Reopener).
func (h harness) Reopen(ctx context.Context, partitions int) (outbox.Store, error) {
	o := h.opts
	o.Partitions = partitions
	return mysqloutbox.New(ctx, h.db, o)
}

// Corruptions names the columns Corrupt damages (conformance.Corrupter);
// each is a way a hand-made UPDATE stops an entry from being published,
// which FetchBatch parks.
func (h harness) Corruptions() []string {
	return []string{"headers column", "empty topic column"}
}

// Corrupt damages the row of id with a real UPDATE of the harness's
// table: bytes the header codec does not accept in headers (a length
// running past the end), or an empty topic.
func (h harness) Corrupt(ctx context.Context, id, how string) error {
	var set string
	switch how {
	case "headers column":
		set = "headers = X'DEADBEEF00FF'"
	case "empty topic column":
		set = "topic = ''"
	default:
		return fmt.Errorf("harness: unknown corruption %q", how)
	}
	var n int
	if err := h.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `outbox` WHERE id = ?", id).Scan(&n); err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("harness: no row has id %q", id)
	}
	_, err := h.db.ExecContext(ctx, "UPDATE `outbox` SET "+set+" WHERE id = ?", id)
	return err
}

var (
	_ conformance.Corrupter = harness{}
	_ conformance.Reopener  = harness{}
)

func runConformance(t *testing.T, opts mysqloutbox.Options) {
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[*sql.Tx] {
		o := opts
		o.Partitions = cfg.Partitions
		o.Archive = o.Archive || cfg.Archive
		b, db := newBackend(t, o)
		return harness{b: b, db: db, opts: o, mu: new(sync.Mutex), runs: map[*sql.Tx]*txRun{}}
	})
}

// TestConformance runs the whole suite on the test server
// (OUTBOX_MYSQL_URL), each case in a database of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	runConformance(t, mysqloutbox.Options{})
}

// TestConformanceArchive runs it with Options.Archive: MarkSent moves
// entries to the archive in a transaction of its own instead of one
// DELETE.
func TestConformanceArchive(t *testing.T) {
	t.Parallel()
	runConformance(t, mysqloutbox.Options{Archive: true})
}
