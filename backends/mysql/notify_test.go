package mysqloutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// receive collects what ch delivers within wait.
func receive(ch <-chan int, wait time.Duration) []int {
	var got []int
	timeout := time.After(wait)
	for {
		select {
		case p, ok := <-ch:
			if !ok {
				return got
			}
			got = append(got, p)
		case <-timeout:
			return got
		}
	}
}

func TestInTxNotifiesAppendedPartitions(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 8})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := b.Notifications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d", "e"}
	var want []int
	var es []outbox.Entry
	for _, k := range keys {
		es = append(es, outbox.Entry{Topic: "t", Key: k})
		want = append(want, outbox.PartitionOf(k, 8))
	}
	slices.Sort(want)
	want = slices.Compact(want)
	appendTx(t, b, db, es...)
	if got := receive(ch, 200*time.Millisecond); !slices.Equal(got, want) {
		t.Fatalf("after InTx: notified %v; want the appended partitions %v", got, want)
	}

	// Rolled back, failed or empty transactions notify nothing.
	_ = b.InTx(ctx, db, func(tx *sql.Tx) error {
		if err := b.AppendInTx(ctx, tx, es...); err != nil {
			return err
		}
		return errRollback
	})
	_ = b.InTx(ctx, db, func(tx *sql.Tx) error { return nil })
	if got := receive(ch, 200*time.Millisecond); len(got) != 0 {
		t.Fatalf("after a rollback and an empty transaction: notified %v; want nothing", got)
	}
	// tx.Commit notifies nothing; Backend.Commit notifies the partitions.
	for _, viaBackend := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t", Key: "a"}, outbox.Entry{Topic: "t", Key: "b"}); err != nil {
			t.Fatal(err)
		}
		want := []int(nil)
		if viaBackend {
			err = b.Commit(tx)
			want = slices.Compact(slices.Sorted(slices.Values([]int{outbox.PartitionOf("a", 8), outbox.PartitionOf("b", 8)})))
		} else {
			err = tx.Commit()
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := receive(ch, 100*time.Millisecond); !slices.Equal(got, want) {
			t.Fatalf("commit through the Backend %v: notified %v; want %v", viaBackend, got, want)
		}
	}
	b.Notify(3, 1, 3)
	b.Notify()
	b.Notify(99)
	if got, want := receive(ch, 100*time.Millisecond), []int{1, 3, outbox.AllPartitions, outbox.AllPartitions}; !slices.Equal(got, want) {
		t.Fatalf("Notify(3, 1, 3), Notify(), Notify(99): %v; want %v", got, want)
	}

	// A full channel never blocks an append; what overflowed is replaced.
	for range 300 {
		b.Notify(0)
	}
	if got := receive(ch, 100*time.Millisecond); len(got) != 256 {
		t.Fatalf("received %d values after 300 notifications; want the 256 the buffer holds", len(got))
	}

	cancel()
	if got := receive(ch, 5*time.Second); len(got) != 0 {
		t.Fatalf("after ctx ended: %v", got)
	}
	if _, ok := <-ch; ok {
		t.Fatal("the channel is open after its ctx ended")
	}
}

func TestNotificationsCloseWithBackend(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{})
	ch, err := b.Notifications(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("a value after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel stays open after Close")
	}
	if _, err := b.Notifications(context.Background()); !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Notifications after Close: %v; want ErrClosed", err)
	}
	if b.PollInterval() != mysqloutbox.DefaultPollInterval {
		t.Fatalf("PollInterval %v", b.PollInterval())
	}
}

func TestNoNotify(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{NoNotify: true})
	ch, err := b.Notifications(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	appendTx(t, b, db, outbox.Entry{Topic: "t"})
	b.Notify()
	if got := receive(ch, 100*time.Millisecond); len(got) != 0 {
		t.Fatalf("with NoNotify: %v", got)
	}
}

// TestInTxGivesUp shows the bound on retries: an fn that always fails
// with a deadlock runs 5 times and the error says so.
func TestInTxGivesUp(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{KeySequence: true})
	ctx := context.Background()
	runs := 0
	err := b.InTx(ctx, db, func(tx *sql.Tx) error {
		runs++
		return provokeLockWait(t, b, db, tx)
	})
	if runs != 5 || !mysqloutbox.Retryable(err) {
		t.Fatalf("InTx ran fn %d times and returned %v; want 5 runs and the last lock error", runs, err)
	}
	// A context that ends during the pause ends InTx with both errors.
	ctx2, cancel := context.WithCancel(ctx)
	err = b.InTx(ctx2, db, func(tx *sql.Tx) error {
		defer cancel()
		return provokeLockWait(t, b, db, tx)
	})
	if !errors.Is(err, context.Canceled) || !mysqloutbox.Retryable(err) {
		t.Fatalf("InTx with ctx cancelled during the pause: %v", err)
	}
}

// provokeLockWait makes tx's append of key "k" time out behind another
// transaction holding the key (innodb_lock_wait_timeout 1 s on tx's
// session) and returns the append's error.
func provokeLockWait(t *testing.T, b *mysqloutbox.Backend, db *sql.DB, tx *sql.Tx) error {
	t.Helper()
	ctx := context.Background()
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if err := b.AppendInTx(ctx, holder, outbox.Entry{Topic: "t", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	defer tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = DEFAULT")
	return b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t", Key: "k"})
}

// TestCommitTrackingIsCollected appends in transactions committed with
// tx.Commit, which the Backend never sees end: their records go when the
// transactions are garbage collected.
func TestCommitTrackingIsCollected(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{})
	ctx := context.Background()
	for range 20 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for mysqloutbox.TrackedTxs(b) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d transactions still recorded after their commits and GC", mysqloutbox.TrackedTxs(b))
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
