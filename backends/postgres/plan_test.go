package pgoutbox_test

import (
	"context"
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

// TestClaimQueryUsesPartialIndexes checks with EXPLAIN that the claim walks
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
	rows, err := p.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+b.FindQuery(), l.Partition, l.Owner, l.Version, 500)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	t.Logf("FindPendingBatch plan:\n%s", plan)
	for _, idx := range []string{"outbox_due_idx", "outbox_holdback_idx"} {
		if !strings.Contains(plan, idx) {
			t.Errorf("the claim plan does not use %s", idx)
		}
	}
	if strings.Contains(plan, "Seq Scan on outbox") {
		t.Errorf("the claim plan scans the whole outbox")
	}
}
