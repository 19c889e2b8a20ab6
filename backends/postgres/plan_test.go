package pgoutbox_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// load inserts n pending entries of partition 0 straight into the table
// (256-byte payloads, keys from 1,000 aggregates), as a backlog to drain.
func load(ctx context.Context, p *pgxpool.Pool, table string, n int) error {
	_, err := p.Exec(ctx, `INSERT INTO `+table+` (id, partition, topic, key, payload, created_at, next_at)
		SELECT 'e' || lpad(i::text, 8, '0'), 0, 'bench', convert_to('agg-' || (i % 1000), 'UTF8'),
		       decode(repeat('ab', 256), 'hex'), now(), now()
		FROM generate_series(1, $1::int) AS i`, n)
	if err == nil {
		_, err = p.Exec(ctx, "ANALYZE "+table)
	}
	return err
}

// TestClaimQueryUsesPartialIndexes checks with EXPLAIN that the claim (and
// FetchNext's claim, with a batch in flight) walks
// the due index in order and answers the hold-back with its index, on a
// backlog with a few failing entries. Run with -v to see the plan.
func TestClaimQueryUsesPartialIndexes(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
	if err := load(ctx, p, table, 20000); err != nil {
		t.Fatal(err)
	}
	// A few failing entries, as in production: they hold back their keys.
	if _, err := p.Exec(ctx, "UPDATE "+table+" SET attempts = 1, next_at = now() + interval '1 hour' WHERE id IN (SELECT id FROM "+table+" ORDER BY id LIMIT 20)"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "ANALYZE "+table); err != nil {
		t.Fatal(err)
	}
	l, err := b.AcquireLease(ctx, 0, "explain", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// FetchNext's statement, with a batch of 500 in flight, must walk the
	// same indexes.
	inFlight := make([]string, 500)
	for i := range inFlight {
		inFlight[i] = fmt.Sprintf("e%08d", 21+i)
	}
	for _, q := range []struct {
		name, sql string
		args      []any
	}{
		{"FindPendingBatch", b.FindQuery(), []any{l.Partition, l.Owner, l.Version, 500}},
		{"FetchNext", b.FindNextQuery(), []any{l.Partition, l.Owner, l.Version, 500, inFlight}},
	} {
		rows, err := p.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+q.sql, q.args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		t.Logf("%s plan:\n%s", q.name, plan)
		for _, idx := range []string{"outbox_due_idx", "outbox_holdback_idx"} {
			if !strings.Contains(plan, idx) {
				t.Errorf("the %s plan does not use %s", q.name, idx)
			}
		}
		if scansOutbox(plan) {
			t.Errorf("the %s plan scans the whole outbox", q.name)
		}
		// With no topic paused, the paused keys (pk) are never computed.
		if !regexp.MustCompile(`CTE Scan on pk \(never executed\)`).MatchString(plan) {
			t.Errorf("the %s plan reads the paused keys while no topic is paused", q.name)
		}
		// The IDs in flight are hashed once per statement, not compared
		// with each row one by one.
		if q.name == "FetchNext" && !strings.Contains(plan, "hashed SubPlan") {
			t.Errorf("the FetchNext plan does not look the IDs in flight up in a hashed subplan")
		}
		// The hold (migration 006) is checked once per statement, as a
		// one-time filter over the due index scan, not per row.
		if !strings.Contains(plan, "One-Time Filter") || !strings.Contains(plan, "outbox_hold") {
			t.Errorf("the %s plan does not check the hold once per statement (a one-time filter on outbox_hold)", q.name)
		}
	}
}

// scansOutbox reports whether an EXPLAIN ANALYZE plan ran a sequential
// scan of the outbox table (a node that was never executed scans nothing).
func scansOutbox(plan string) bool {
	for _, l := range strings.Split(plan, "\n") {
		if regexp.MustCompile(`Seq Scan on outbox(\s|$)`).MatchString(l) && !strings.Contains(l, "(never executed)") {
			return true
		}
	}
	return false
}

// TestPartitionStatsQueryUsesIndexes checks with EXPLAIN that the due
// index (for the pending counts, index-only) and the parked index (for the
// parked counts) can answer PartitionStats without a scan of the whole
// outbox, on 20,000 entries over 16 partitions. Whether the planner prefers
// them to a sequential scan depends on the visibility map: while other
// transactions keep vacuum from marking pages all-visible (as the other
// tests of this package do), an index-only scan costs heap reads and a
// small table is read sequentially, or through a bitmap, instead. So the
// plan is taken with sequential and bitmap scans disabled (SET LOCAL),
// which penalizes them but still picks one where no index applies, and
// leaves an index-only scan as the cheapest use of the due index wherever
// the index holds every column the counts need: the check fails if a
// rewrite of the query stops matching the indexes or reads a column the
// due index lacks. Run with -v
// to see the plan; docs/postgres.md has the planner's own choice on
// 1,000,000 vacuumed entries (BenchmarkPartitionStats).
func TestPartitionStatsQueryUsesIndexes(t *testing.T) {
	t.Parallel()
	const partitions = 16
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: partitions})
	ctx := t.Context()
	if err := loadSpread(ctx, p, pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize(), 20000, partitions); err != nil {
		t.Fatal(err)
	}
	var lines []string
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		for _, set := range []string{"SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off"} {
			if _, err := tx.Exec(ctx, set); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+b.PartitionStatsQuery(), partitions)
		if err != nil {
			return err
		}
		lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	t.Logf("PartitionStats plan (sequential and bitmap scans off):\n%s", plan)
	for _, want := range []string{"Index Only Scan using outbox_due_idx", "outbox_parked_idx"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the PartitionStats plan has no %q", want)
		}
	}
	if scansOutbox(plan) {
		t.Errorf("the PartitionStats plan scans the whole outbox")
	}
}

// explain returns the EXPLAIN ANALYZE plan of sql with args.
func explain(t *testing.T, p *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	rows, err := p.Query(t.Context(), "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestClaimQueryWithPauses checks with EXPLAIN the claim's cost while
// something is paused, on a backlog of 20,000 entries of which 50 are of
// a paused topic: the due index is walked as without a pause, the paused
// keys of the partition are computed once per statement (the only scan
// of the partition's rows, loops=1), and every other read of the outbox
// per row is a probe of the hold-back index, never a scan of the
// partition. A paused partition reads no entry row at all. Run with -v to
// see the plans.
func TestClaimQueryWithPauses(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
	if err := load(ctx, p, table, 20000); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "UPDATE "+table+" SET topic = 'paused' WHERE id IN (SELECT id FROM "+table+" ORDER BY id LIMIT 50)"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "ANALYZE "+table); err != nil {
		t.Fatal(err)
	}
	if err := b.PauseTopic(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	l, err := b.AcquireLease(ctx, 0, "explain", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	plan := explain(t, p, b.FindQuery(), l.Partition, l.Owner, l.Version, 500)
	t.Logf("FindPendingBatch plan with a paused topic:\n%s", plan)
	if !strings.Contains(plan, "Index Scan using outbox_due_idx on outbox o") {
		t.Errorf("the plan with a paused topic does not walk the due index")
	}
	if !regexp.MustCompile(`CTE Scan on pk .*loops=1\)`).MatchString(plan) {
		t.Errorf("the plan with a paused topic does not compute the paused keys once")
	}
	loops := regexp.MustCompile(`loops=(\d+)\)`)
	for _, line := range strings.Split(plan, "\n") {
		m := loops.FindStringSubmatch(line)
		if m == nil || m[1] == "1" || !regexp.MustCompile(` on outbox(\s|$)`).MatchString(line) {
			continue
		}
		if !strings.Contains(line, "outbox_holdback_idx") {
			t.Errorf("the plan with a paused topic reads the outbox per row other than through the hold-back index: %s", strings.TrimSpace(line))
		}
	}
	// Keys whose first entry is paused are held back: the batch of 500
	// has none of the 50 paused entries nor any entry after them of
	// their keys (the keys of the first 50 entries, e00000001..50, are
	// agg-1..agg-50).
	got, err := b.FindPendingBatch(ctx, l, 500)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range got {
		if n := keyNum(e.Key); e.Topic == "paused" || (n >= 1 && n <= 50) {
			t.Fatalf("fetched %s (topic %s, key %s) while its topic or key is paused", e.ID, e.Topic, e.Key)
		}
	}

	if err := b.PausePartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	plan = explain(t, p, b.FindQuery(), l.Partition, l.Owner, l.Version, 500)
	t.Logf("FindPendingBatch plan with the partition paused:\n%s", plan)
	if !regexp.MustCompile(`Index Scan using outbox_due_idx on outbox o \(never executed\)`).MatchString(plan) {
		t.Errorf("the plan of a paused partition reads entry rows")
	}
}

// keyNum is n of a key "agg-n" of load.
func keyNum(key string) int {
	var n int
	_, _ = fmt.Sscanf(key, "agg-%d", &n)
	return n
}
