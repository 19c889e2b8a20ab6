package pgoutbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// upsertAcquireSQL is the AcquireLease statement before the lease rows
// were created by migration 004: an upsert, which locks the conflicting
// lease row even when its WHERE is false. TestFailedAcquireTakesNoLock
// checks that it waits for a fenced write, and BenchmarkLeaseContention
// compares it with the current statement.
const upsertAcquireSQL = `INSERT INTO {lease} AS l (partition, owner, version, expires_at)
VALUES ($1, $2, 1, now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (partition) DO UPDATE
SET owner = EXCLUDED.owner,
    version = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > now()
                   THEN l.version ELSE l.version + 1 END,
    expires_at = EXCLUDED.expires_at
WHERE l.owner = EXCLUDED.owner OR l.expires_at <= now()
RETURNING l.version, l.expires_at`

func TestAcquireLeaseVersions(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: 2})
	ctx := t.Context()
	a1, err := b.AcquireLease(ctx, 1, "a", time.Minute)
	if err != nil || a1.Version != 1 {
		t.Fatalf("first AcquireLease: %+v, %v; want version 1", a1, err)
	}
	a2, err := b.AcquireLease(ctx, 1, "a", 2*time.Minute)
	if err != nil || a2.Version != 1 || !a2.Expires.After(a1.Expires) {
		t.Fatalf("the holder's AcquireLease: %+v, %v; want version 1, extended past %v", a2, err, a1.Expires)
	}
	if _, err := b.AcquireLease(ctx, 1, "b", time.Minute); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("another owner's AcquireLease: %v, want ErrLeaseHeld", err)
	}
	if err := b.ReleaseLease(ctx, a2); err != nil {
		t.Fatal(err)
	}
	b1, err := b.AcquireLease(ctx, 1, "b", time.Minute)
	if err != nil || b1.Version != 2 {
		t.Fatalf("AcquireLease after release: %+v, %v; want version 2", b1, err)
	}
	// A lease row removed by hand is recreated.
	if _, err := p.Exec(ctx, "DELETE FROM "+pgx.Identifier{b.Options().Schema, "outbox_lease"}.Sanitize()+" WHERE partition = 0"); err != nil {
		t.Fatal(err)
	}
	c1, err := b.AcquireLease(ctx, 0, "c", time.Minute)
	if err != nil || c1.Version != 1 {
		t.Fatalf("AcquireLease of a missing lease row: %+v, %v; want version 1", c1, err)
	}
	if _, err := b.AcquireLease(ctx, 0, "d", time.Minute); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("another owner's AcquireLease of the recreated row: %v, want ErrLeaseHeld", err)
	}
}

// TestFailedAcquireTakesNoLock holds the lease row FOR SHARE, as the
// holder's fenced writes do, and checks that a standby's AcquireLease,
// under a lock_timeout, fails with ErrLeaseHeld instead of waiting for
// the lock. The earlier upsert, run the same way, must wait and time out:
// that shows the test would catch a statement that locks.
func TestFailedAcquireTakesNoLock(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	if _, err := b.AcquireLease(ctx, 0, "holder", time.Hour); err != nil {
		t.Fatal(err)
	}
	cfg := p.Config().Copy()
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "1s"
	cfg.MaxConns = 2
	standbyPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer standbyPool.Close()
	standby := func(q string) *pgoutbox.Backend {
		sb, err := pgoutbox.New(ctx, standbyPool, pgoutbox.Options{Schema: b.Options().Schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Close() })
		if q != "" {
			sb.SetAcquireQuery(q)
		}
		return sb
	}
	current, upsert := standby(""), standby(upsertAcquireSQL)

	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var held int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM "+pgx.Identifier{b.Options().Schema, "outbox_lease"}.Sanitize()+
		" WHERE partition = 0 AND owner = 'holder' FOR SHARE) AS l").Scan(&held); err != nil || held != 1 {
		t.Fatalf("locking the lease row FOR SHARE: %d rows, %v", held, err)
	}

	_, err = upsert.AcquireLease(ctx, 0, "standby", time.Minute)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" { // lock_not_available
		t.Fatalf("the earlier upsert under a lock_timeout: %v; want it to wait for the FOR SHARE lock and time out (55P03), or the test proves nothing", err)
	}
	for _, owner := range []string{"standby", "standby-2"} {
		if _, err := current.AcquireLease(ctx, 0, owner, time.Minute); !errors.Is(err, outbox.ErrLeaseHeld) {
			t.Fatalf("AcquireLease by %s while the holder's write holds the lease row: %v; want ErrLeaseHeld without waiting for the lock", owner, err)
		}
	}
}

// TestArgumentErrors checks that every method rejects bad arguments with
// ErrInvalidArgument, in the package's words ("pgoutbox: <op>: ...")
// naming the argument.
func TestArgumentErrors(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, extended, pgoutbox.Options{Partitions: 2})
	ctx := t.Context()
	ok := outbox.Lease{Partition: 0, Owner: "o", Version: 1}
	bad := outbox.Lease{Partition: 2, Owner: "o", Version: 1}
	cases := []struct {
		op, arg string
		call    func() error
	}{
		{"AcquireLease", "partition -1", func() error { _, err := b.AcquireLease(ctx, -1, "o", time.Second); return err }},
		{"AcquireLease", "partition 2", func() error { _, err := b.AcquireLease(ctx, 2, "o", time.Second); return err }},
		{"AcquireLease", "owner", func() error { _, err := b.AcquireLease(ctx, 0, "", time.Second); return err }},
		{"AcquireLease", "owner", func() error { _, err := b.AcquireLease(ctx, 0, "o\x00", time.Second); return err }},
		{"AcquireLease", "ttl", func() error { _, err := b.AcquireLease(ctx, 0, "o", 0); return err }},
		{"RenewLease", "ttl", func() error { _, err := b.RenewLease(ctx, ok, -time.Second); return err }},
		{"RenewLease", "partition 2", func() error { _, err := b.RenewLease(ctx, bad, time.Second); return err }},
		{"ReleaseLease", "partition 2", func() error { return b.ReleaseLease(ctx, bad) }},
		{"FindPendingBatch", "limit", func() error { _, err := b.FindPendingBatch(ctx, ok, 0); return err }},
		{"FindPendingBatch", "partition 2", func() error { _, err := b.FindPendingBatch(ctx, bad, 1); return err }},
		{"MarkSent", "partition 2", func() error { return b.MarkSent(ctx, bad, []string{"x"}) }},
		{"MarkFailed", "partition 2", func() error { return b.MarkFailed(ctx, bad, []outbox.Failure{{ID: "x"}}) }},
		{"Release", "partition 2", func() error { return b.Release(ctx, bad, []string{"x"}) }},
		{"Heartbeat", "owner", func() error { _, err := b.Heartbeat(ctx, outbox.Member{}, time.Second); return err }},
		{"Heartbeat", "ttl", func() error { _, err := b.Heartbeat(ctx, outbox.Member{Owner: "o"}, 0); return err }},
		{"Heartbeat", "MaxPartitions", func() error {
			_, err := b.Heartbeat(ctx, outbox.Member{Owner: "o", MaxPartitions: -1}, time.Second)
			return err
		}},
		{"Heartbeat", "partition 2", func() error {
			_, err := b.Heartbeat(ctx, outbox.Member{Owner: "o", Partitions: []int{0, 2}}, time.Second)
			return err
		}},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("%s with a bad %s: %v, want ErrInvalidArgument", c.op, c.arg, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "pgoutbox: "+c.op+": ") || !strings.Contains(err.Error(), c.arg) {
			t.Errorf("%s with a bad %s: %q; want it to start with %q and name %q", c.op, c.arg, err, "pgoutbox: "+c.op+": ", c.arg)
		}
	}
}
