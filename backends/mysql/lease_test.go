package mysqloutbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// TestLeaseConcurrentAcquire races 8 acquirers for one partition, round
// after round: exactly one wins each round, and the versions granted grow
// strictly from round to round.
func TestLeaseConcurrentAcquire(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // watchdog
	defer cancel()
	var last int64
	for round := range 10 {
		var (
			mu     sync.Mutex
			wins   []outbox.Lease
			others []error
			wg     sync.WaitGroup
		)
		start := make(chan struct{})
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := b.AcquireLease(ctx, 0, "relay-"+string(rune('a'+g)), time.Minute)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					wins = append(wins, l)
				} else if !errors.Is(err, outbox.ErrLeaseHeld) {
					others = append(others, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(others) > 0 {
			t.Fatalf("round %d: acquires failed with %v; want only ErrLeaseHeld", round, others)
		}
		if len(wins) != 1 {
			t.Fatalf("round %d: %d acquires won (%+v); want exactly one", round, len(wins), wins)
		}
		if wins[0].Version <= last {
			t.Fatalf("round %d: version %d granted after %d; versions must grow strictly", round, wins[0].Version, last)
		}
		last = wins[0].Version
		if err := b.ReleaseLease(ctx, wins[0]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeaseAcquireSkipsLockedRow holds a shared lock on a free lease row,
// as a fenced write of the relay does, in another transaction: an acquire
// reports the lease held at once instead of waiting for the lock.
func TestLeaseAcquireSkipsLockedRow(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2})
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var owner string
	if err := tx.QueryRowContext(ctx, "SELECT owner FROM outbox_lease WHERE `partition` = 1 LOCK IN SHARE MODE").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_, err = b.AcquireLease(ctx, 1, "standby", time.Minute)
	if !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("AcquireLease of a locked lease row: %v; want ErrLeaseHeld", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("AcquireLease of a locked lease row took %v; want no lock wait", d)
	}
	// The other partition is not affected, and once the lock is gone the
	// partition is free.
	if _, err := b.AcquireLease(ctx, 0, "standby", time.Minute); err != nil {
		t.Fatalf("AcquireLease of partition 0: %v", err)
	}
	tx.Rollback()
	if _, err := b.AcquireLease(ctx, 1, "standby", time.Minute); err != nil {
		t.Fatalf("AcquireLease after the lock was released: %v", err)
	}
}

// TestLeaseSemantics pins extend, renew, release and expiry.
func TestLeaseSemantics(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	a, err := b.AcquireLease(ctx, 0, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(a.Expires); d < 50*time.Second || d > 70*time.Second {
		t.Fatalf("Expires %v is %v from now; want about a minute (clocks of this machine)", a.Expires, d)
	}
	again, err := b.AcquireLease(ctx, 0, "a", 2*time.Minute)
	if err != nil || again.Version != a.Version || !again.Expires.After(a.Expires) {
		t.Fatalf("AcquireLease by the holder: %+v, %v; want the same version, later expiry than %+v", again, err, a)
	}
	if _, err := b.AcquireLease(ctx, 0, "b", time.Minute); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("AcquireLease by another owner: %v; want ErrLeaseHeld", err)
	}
	short, err := b.RenewLease(ctx, a, 50*time.Millisecond)
	if err != nil || short.Version != a.Version {
		t.Fatalf("RenewLease: %+v, %v", short, err)
	}
	if err := b.ReleaseLease(ctx, outbox.Lease{Partition: 0, Owner: "a ", Version: a.Version}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RenewLease(ctx, a, time.Minute); err != nil {
		t.Fatalf("the lease was released by an owner that differs only in a trailing space: %v", err)
	}
	if _, err := b.RenewLease(ctx, a, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := b.RenewLease(ctx, a, time.Minute); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("RenewLease after expiry: %v; want ErrLeaseLost", err)
	}
	c, err := b.AcquireLease(ctx, 0, "b", time.Minute)
	if err != nil || c.Version != a.Version+1 {
		t.Fatalf("AcquireLease after expiry: %+v, %v; want version %d", c, err, a.Version+1)
	}
	if err := b.ReleaseLease(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RenewLease(ctx, c, time.Minute); err != nil {
		t.Fatalf("a stale holder's release freed the new holder's lease: %v", err)
	}
	if err := b.ReleaseLease(ctx, c); err != nil {
		t.Fatal(err)
	}
	d, err := b.AcquireLease(ctx, 0, "a", time.Minute)
	if err != nil || d.Version != c.Version+1 {
		t.Fatalf("AcquireLease after release: %+v, %v; want version %d", d, err, c.Version+1)
	}
	if _, err := b.AcquireLease(ctx, 0, "", time.Minute); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("empty owner: %v", err)
	}
}

// TestLeaseRowRecreated deletes a lease row by hand: the next acquire
// recreates it with a version above every one granted before.
func TestLeaseRowRecreated(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	var last outbox.Lease
	for range 3 {
		l, err := b.AcquireLease(ctx, 0, "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
		last = l
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM outbox_lease"); err != nil {
		t.Fatal(err)
	}
	l, err := b.AcquireLease(ctx, 0, "b", time.Minute)
	if err != nil || l.Version <= last.Version {
		t.Fatalf("AcquireLease of a deleted lease row: %+v, %v; want a version above %d", l, err, last.Version)
	}
	if _, err := b.AcquireLease(ctx, 0, "a", time.Minute); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("the recreated lease is not held: %v", err)
	}
	if _, err := b.RenewLease(ctx, l, time.Minute); err != nil {
		t.Fatalf("RenewLease of the recreated lease: %v", err)
	}
}

// TestLeaseStandbyOfALiveLeaseTakesNoLock: while the holder's fenced
// write holds a shared lock on the lease row, a standby's acquire is
// refused at once by one non-locking read, and the holder renews once the
// write's transaction ends.
func TestLeaseStandbyOfALiveLeaseTakesNoLock(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	db.SetMaxOpenConns(2) // the fenced write's connection and one for the acquires
	ctx := context.Background()
	held, err := b.AcquireLease(ctx, 0, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var owner string
	if err := tx.QueryRowContext(ctx, "SELECT owner FROM outbox_lease WHERE `partition` = 0 LOCK IN SHARE MODE").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	questions := func() int {
		var name string
		var n int
		if err := conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	q0 := questions()
	conn.Close() // the acquire runs on this same connection, the only free one
	begin := time.Now()
	if _, err := b.AcquireLease(ctx, 0, "standby", time.Minute); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("standby AcquireLease: %v; want ErrLeaseHeld", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("the standby's acquire took %v; want no lock wait", d)
	}
	if conn, err = db.Conn(ctx); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if n := questions() - q0 - 1; n != 1 {
		t.Fatalf("the standby's acquire sent %d statements; want the one non-locking read", n)
	}
	tx.Rollback()
	if _, err := b.RenewLease(ctx, held, time.Minute); err != nil {
		t.Fatalf("RenewLease after the fenced write: %v", err)
	}
}
