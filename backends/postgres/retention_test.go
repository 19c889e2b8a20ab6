package pgoutbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// archiveName is the quoted archive of b.
func archiveName(b *pgoutbox.Backend) string {
	return pgx.Identifier{b.Options().Schema, b.Options().Table + "_archive"}.Sanitize()
}

// sendAll appends ids with prefix and marks them sent under a lease of
// partition 0 (the backends of these tests have one partition).
func sendAll(t *testing.T, b *pgoutbox.Backend, p *pgxpool.Pool, prefix string, n int) []string {
	t.Helper()
	ids := appendN(t, b, p, prefix, n, func(int) string { return "" })
	l, err := b.AcquireLease(t.Context(), 0, "sender", time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.MarkSent(t.Context(), l, ids))
	require.NoError(t, b.ReleaseLease(t.Context(), l))
	return ids
}

// archivedIDs lists the archive's IDs in sent_at order.
func archivedIDs(t *testing.T, b *pgoutbox.Backend, p *pgxpool.Pool) []string {
	t.Helper()
	rows, err := p.Query(t.Context(), "SELECT id FROM "+archiveName(b)+" ORDER BY sent_at, id")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

var epoch2020 = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// TestPurgeArchiveBatchBoundedOldestFirst: each call removes at most
// limit rows, the oldest first, only those sent before the horizon, and
// says whether more remain; OldestArchived follows.
func TestPurgeArchiveBatchBoundedOldestFirst(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Archive: true})
	ctx := t.Context()

	removed, more, err := b.PurgeArchiveBatch(ctx, time.Now().Add(time.Hour), 5)
	require.NoError(t, err)
	require.Equal(t, int64(0), removed)
	require.False(t, more, "an empty archive has no more")
	_, ok, err := b.OldestArchived(ctx)
	require.NoError(t, err)
	require.False(t, ok, "OldestArchived of an empty archive")

	ids := sendAll(t, b, p, "a", 10)
	// a000000 was sent at 01:00, a000001 at 02:00, ...
	_, err = p.Exec(ctx, "UPDATE "+archiveName(b)+" SET sent_at = $1::timestamptz + (substr(id, 2)::int + 1) * interval '1 hour'", epoch2020)
	require.NoError(t, err)
	oldest, ok, err := b.OldestArchived(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, oldest.Equal(epoch2020.Add(time.Hour)), "oldest %v", oldest)

	before := epoch2020.Add(7*time.Hour + 30*time.Minute) // 7 rows are older
	var got []int64
	for {
		removed, more, err := b.PurgeArchiveBatch(ctx, before, 3)
		require.NoError(t, err)
		got = append(got, removed)
		if !more {
			break
		}
		require.Less(t, len(got), 10, "PurgeArchiveBatch keeps reporting more")
	}
	require.Equal(t, []int64{3, 3, 1}, got)
	require.Equal(t, ids[7:], archivedIDs(t, b, p), "the 7 oldest are gone, the rest kept")
	oldest, _, err = b.OldestArchived(ctx)
	require.NoError(t, err)
	require.True(t, oldest.Equal(epoch2020.Add(8*time.Hour)), "oldest %v", oldest)

	_, _, err = b.PurgeArchiveBatch(ctx, before, 0)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)

	// PurgeArchive (outbox purge) runs the batches to the end.
	n, err := b.PurgeArchive(ctx, time.Now(), 2)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	require.Empty(t, archivedIDs(t, b, p))
}

// TestPurgeArchiveWithoutArchiveOption: with Options.Archive false the
// methods work on the (empty) archive.
func TestPurgeArchiveWithoutArchiveOption(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	sendAll(t, b, p, "x", 3)
	removed, more, err := b.PurgeArchiveBatch(ctx, time.Now().Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, int64(0), removed)
	require.False(t, more)
	_, ok, err := b.OldestArchived(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, b.MaintainArchive(ctx, time.Now()))
}

// TestPurgeArchiveSkipsLockedRows: a row another transaction holds (SELECT
// ... FOR UPDATE) is skipped without waiting, and removed by a later call
// once that transaction ends.
func TestPurgeArchiveSkipsLockedRows(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Archive: true})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // a watchdog: a purge that waits would hang here
	defer cancel()
	ids := sendAll(t, b, p, "l", 5)
	holder, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.Background()) }()
	var locked string
	require.NoError(t, holder.QueryRow(ctx, "SELECT id FROM "+archiveName(b)+" WHERE id = $1 FOR UPDATE", ids[2]).Scan(&locked))

	removed, _, err := b.PurgeArchiveBatch(ctx, time.Now().Add(time.Hour), 100)
	require.NoError(t, err, "the purge must skip the locked row, not wait for it")
	require.Equal(t, int64(4), removed)
	require.Equal(t, []string{ids[2]}, archivedIDs(t, b, p))

	require.NoError(t, holder.Commit(ctx))
	removed, more, err := b.PurgeArchiveBatch(ctx, time.Now().Add(time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), removed)
	require.False(t, more)
	require.Empty(t, archivedIDs(t, b, p))
}

// partitionsOf lists the bare names of the archive's partitions.
func partitionsOf(t *testing.T, b *pgoutbox.Backend, p *pgxpool.Pool) []string {
	t.Helper()
	rows, err := p.Query(t.Context(), `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1) ORDER BY 1`, archiveName(b))
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// dayNames are the partition names of the days from first, n of them.
func dayNames(table string, first time.Time, n int) []string {
	var out []string
	for i := range n {
		out = append(out, table+"_archive_p"+first.AddDate(0, 0, i).Format("20060102"))
	}
	return out
}

func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// insertArchived inserts archive rows by hand, one per sent time.
func insertArchived(t *testing.T, b *pgoutbox.Backend, p *pgxpool.Pool, prefix string, sent ...time.Time) {
	t.Helper()
	for i, s := range sent {
		_, err := p.Exec(t.Context(), "INSERT INTO "+archiveName(b)+` (seq, id, partition, topic, key, created_at, attempts, last_error, sent_at)
VALUES ($1, $2, 0, 't', ''::bytea, $3, 1, '', $3)`, i+1, prefix+string(rune('a'+i)), s)
		require.NoError(t, err)
	}
}

// TestPartitionedArchiveCreatesAheadAndDrops: Migrate with
// ArchivePartitioned makes today's and ArchiveDaysAhead days' partitions
// and a DEFAULT one; MarkSent archives into today's; MaintainArchive makes
// later days' partitions once; PurgeArchiveBatch drops whole old days, one
// per call, counting their rows, keeps the day the horizon falls in whole,
// and deletes the old rows of the DEFAULT partition in batches.
func TestPartitionedArchiveCreatesAheadAndDrops(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Archive: true, ArchivePartitioned: true})
	ctx := t.Context()
	require.True(t, b.ArchivePartitioned())
	today := utcDay(dbNow(t, p))
	want := append(dayNames("outbox", today, pgoutbox.ArchiveDaysAhead+1), "outbox_archive_default")
	slices.Sort(want)
	require.Equal(t, want, partitionsOf(t, b, p))

	// MarkSent lands in today's partition; a re-sent ID gets a second row.
	ids := sendAll(t, b, p, "s", 3)
	appendN(t, b, p, "s", 1, func(int) string { return "" })
	sendAll(t, b, p, "s", 1)
	var where []string
	rows, err := p.Query(ctx, "SELECT DISTINCT tableoid::regclass::text FROM "+archiveName(b))
	require.NoError(t, err)
	where, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, where, 1)
	require.True(t, strings.HasSuffix(where[0], "outbox_archive_p"+today.Format("20060102")), "archived into %v", where)
	var copies int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+archiveName(b)+" WHERE id = $1", ids[0]).Scan(&copies))
	require.Equal(t, 2, copies, "one archive row per delivery of an ID")

	// Partitions for days long past, with rows in them.
	old := today.AddDate(0, 0, -30)
	require.NoError(t, b.MaintainArchive(ctx, old))
	require.Subset(t, partitionsOf(t, b, p), dayNames("outbox", old, pgoutbox.ArchiveDaysAhead+1))
	insertArchived(t, b, p, "d0", old.Add(time.Hour), old.Add(2*time.Hour))
	insertArchived(t, b, p, "d1", old.AddDate(0, 0, 1).Add(time.Hour))
	insertArchived(t, b, p, "d2", old.AddDate(0, 0, 2).Add(time.Hour), old.AddDate(0, 0, 2).Add(5*time.Hour))

	before := old.AddDate(0, 0, 2).Add(3 * time.Hour) // d0, d1 whole; 1 row of d2
	// d0 analyzed: its count is the catalogue's (exact for 2 rows); d1
	// never analyzed: count(*).
	_, err = p.Exec(ctx, "ANALYZE "+pgx.Identifier{b.Options().Schema, dayNames("outbox", old, 1)[0]}.Sanitize())
	require.NoError(t, err)
	removed, more, err := b.PurgeArchiveBatch(ctx, before, 1)
	require.NoError(t, err)
	require.Equal(t, int64(2), removed, "the drop of day d0 counts its rows")
	require.True(t, more)
	removed, more, err = b.PurgeArchiveBatch(ctx, before, 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), removed)
	require.True(t, more)
	require.NotContains(t, partitionsOf(t, b, p), dayNames("outbox", old, 1)[0])
	require.NotContains(t, partitionsOf(t, b, p), dayNames("outbox", old.AddDate(0, 0, 1), 1)[0])
	// Day d2 straddles the horizon: no row of it is deleted (no dead
	// tuples); it goes whole once the day is past.
	removed, more, err = b.PurgeArchiveBatch(ctx, before, 1)
	require.NoError(t, err)
	require.Equal(t, int64(0), removed)
	require.False(t, more)
	require.Contains(t, partitionsOf(t, b, p), dayNames("outbox", old.AddDate(0, 0, 2), 1)[0])
	oldest, ok, err := b.OldestArchived(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, oldest.Equal(old.AddDate(0, 0, 2).Add(time.Hour)), "oldest %v", oldest)
	removed, more, err = b.PurgeArchiveBatch(ctx, old.AddDate(0, 0, 3), 100)
	require.NoError(t, err)
	require.Equal(t, int64(2), removed)
	require.True(t, more)

	// A day with no partition lands in DEFAULT; MaintainArchive cannot
	// make that day's partition then, skips it (with a log line) and makes
	// the others; the row is purged in batches from DEFAULT.
	far := today.AddDate(0, 0, 40)
	insertArchived(t, b, p, "f", far.Add(time.Hour))
	require.NoError(t, b.MaintainArchive(ctx, far))
	parts := partitionsOf(t, b, p)
	require.NotContains(t, parts, dayNames("outbox", far, 1)[0])
	require.Subset(t, parts, dayNames("outbox", far.AddDate(0, 0, 1), pgoutbox.ArchiveDaysAhead))
	n, err := b.PurgeArchive(ctx, far.AddDate(0, 0, 1), 1000)
	require.NoError(t, err)
	require.Positive(t, n)
	require.Empty(t, archivedIDs(t, b, p))
}

// TestPartitionDropYieldsToLockHolder: a transaction reading an old
// partition makes its drop give up within the lock timeout, with an error
// wrapping ErrArchiveLockTimeout, and changes nothing; MarkSent keeps
// archiving while the janitor waits; once the reader ends, the drop
// succeeds.
func TestPartitionDropYieldsToLockHolder(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Archive: true, ArchivePartitioned: true})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second) // watchdog
	defer cancel()
	old := utcDay(dbNow(t, p)).AddDate(0, 0, -20)
	require.NoError(t, b.MaintainArchive(ctx, old))
	insertArchived(t, b, p, "o", old.Add(time.Hour), old.Add(2*time.Hour), old.Add(3*time.Hour))
	oldPart := pgx.Identifier{b.Options().Schema, dayNames("outbox", old, 1)[0]}.Sanitize()

	holder, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.Background()) }()
	var n int
	require.NoError(t, holder.QueryRow(ctx, "SELECT count(*) FROM "+oldPart).Scan(&n))
	require.Equal(t, 3, n)

	// The default lock timeout: the call gives up and changes nothing.
	_, _, err = b.PurgeArchiveBatch(ctx, old.AddDate(0, 0, 1), 100)
	require.ErrorIs(t, err, pgoutbox.ErrArchiveLockTimeout)
	require.Contains(t, partitionsOf(t, b, p), dayNames("outbox", old, 1)[0])

	// A janitor with a long lock timeout waits on the reader; MarkSent
	// archives meanwhile and finishes while the reader is still open.
	o := b.Options()
	o.ArchiveLockTimeout = 45 * time.Second
	janitor, err := pgoutbox.New(ctx, p, o)
	require.NoError(t, err)
	defer janitor.Close()
	type result struct {
		removed int64
		more    bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		r, m, err := janitor.PurgeArchiveBatch(ctx, old.AddDate(0, 0, 1), 100)
		done <- result{r, m, err}
	}()
	waitForRelationLockWait(ctx, t, p, oldPart)
	sendAll(t, b, p, "m", 5)
	// Read today's partition only: a read of the whole archive would
	// queue for the old partition behind the janitor.
	var archived int
	todayPart := pgx.Identifier{b.Options().Schema, dayNames("outbox", utcDay(dbNow(t, p)), 1)[0]}.Sanitize()
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+todayPart+" WHERE id LIKE 'm%'").Scan(&archived))
	require.Equal(t, 5, archived, "MarkSent archived while the janitor waited")
	select {
	case r := <-done:
		t.Fatalf("the janitor returned %+v while the reader still holds the partition", r)
	default:
	}
	require.NoError(t, holder.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, int64(3), r.removed)
	require.True(t, r.more)
	require.NotContains(t, partitionsOf(t, b, p), dayNames("outbox", old, 1)[0])
}

// waitForRelationLockWait returns once some session waits for a lock on
// the relation rel.
func waitForRelationLockWait(ctx context.Context, t *testing.T, p *pgxpool.Pool, rel string) {
	t.Helper()
	for {
		var waiting bool
		err := p.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = to_regclass($1) AND NOT granted)`, rel).Scan(&waiting)
		require.NoError(t, err)
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("nobody waited for a lock on " + rel)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestPartitionArchiveConvertsLive: a plain archive with rows becomes
// partitioned; every row is kept and readable by ID; a Backend made
// before the conversion keeps archiving (its first MarkSent after it may
// fail once, and the next succeeds), into the partition whose range holds
// the sent time; retention then deletes the converted table's old rows.
func TestPartitionArchiveConvertsLive(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Archive: true})
	ctx := t.Context()
	require.False(t, b.ArchivePartitioned())
	ids := sendAll(t, b, p, "c", 6)
	_, err := p.Exec(ctx, "UPDATE "+archiveName(b)+" SET sent_at = now() - interval '30 days' WHERE id = ANY($1)", ids[:2])
	require.NoError(t, err)

	opts := b.Options()
	opts.Partitions = 0
	// A Backend that does not archive, made before the conversion.
	quiet, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: opts.Schema})
	require.NoError(t, err)
	defer quiet.Close()
	require.NoError(t, pgoutbox.PartitionArchive(ctx, p, opts))
	require.NoError(t, pgoutbox.PartitionArchive(ctx, p, opts), "a second run only checks the day partitions")
	var partitioned bool
	require.NoError(t, p.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1))", archiveName(b)).Scan(&partitioned))
	require.True(t, partitioned)
	require.Equal(t, ids, sortedCopy(archivedIDs(t, b, p)), "every archived row is kept")
	var topic string
	require.NoError(t, p.QueryRow(ctx, "SELECT topic FROM "+archiveName(b)+" WHERE id = $1", ids[0]).Scan(&topic))
	require.Equal(t, "t", topic, "an old archived ID is found by ID")

	today := utcDay(dbNow(t, p))
	cutoff := today.AddDate(0, 0, 2)
	parts := partitionsOf(t, b, p)
	require.Contains(t, parts, "outbox_archive_upto_"+cutoff.Format("20060102"))
	require.Contains(t, parts, "outbox_archive_default")
	require.Subset(t, parts, dayNames("outbox", cutoff, pgoutbox.ArchiveDaysAhead-1))

	// The Backend made before the conversion: re-send an archived ID.
	appendN(t, b, p, "c", 1, func(int) string { return "" })
	l, err := b.AcquireLease(ctx, 0, "sender", time.Minute)
	require.NoError(t, err)
	if err := b.MarkSent(ctx, l, ids[:1]); err != nil {
		t.Logf("first MarkSent after the conversion: %v", err)
		require.NoError(t, b.MarkSent(ctx, l, ids[:1]), "the second MarkSent uses the partitioned archive's statement")
	}
	require.True(t, b.ArchivePartitioned())
	var copies int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+archiveName(b)+" WHERE id = $1", ids[0]).Scan(&copies))
	require.Equal(t, 2, copies)
	var where string
	require.NoError(t, p.QueryRow(ctx, "SELECT tableoid::regclass::text FROM "+archiveName(b)+" WHERE id = $1 ORDER BY sent_at DESC LIMIT 1", ids[0]).Scan(&where))
	require.True(t, strings.HasSuffix(where, "outbox_archive_upto_"+cutoff.Format("20060102")), "sent today, before the cut-off: %s", where)

	// The quiet Backend learns of it from its first MaintainArchive of a
	// day.
	require.False(t, quiet.ArchivePartitioned())
	require.NoError(t, quiet.MaintainArchive(ctx, time.Now()))
	require.True(t, quiet.ArchivePartitioned())

	// A new Backend finds the partitioned archive; retention deletes the
	// two old rows from the converted table in batches.
	nb, err := pgoutbox.New(ctx, p, opts)
	require.NoError(t, err)
	defer nb.Close()
	require.True(t, nb.ArchivePartitioned())
	removed, err := nb.PurgeArchive(ctx, dbNow(t, p).AddDate(0, 0, -7), 1)
	require.NoError(t, err)
	require.Equal(t, int64(2), removed)
	require.Len(t, archivedIDs(t, b, p), 5)
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestPartitionArchiveEmpty: an empty plain archive is replaced, not
// attached; migrate down to version 1 drops the partitioned archive.
func TestPartitionArchiveEmpty(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	opts := b.Options()
	opts.Partitions = 0
	opts.ArchivePartitioned = true
	require.NoError(t, pgoutbox.Migrate(ctx, p, opts))
	today := utcDay(dbNow(t, p))
	want := append(dayNames("outbox", today, pgoutbox.ArchiveDaysAhead+1), "outbox_archive_default")
	slices.Sort(want)
	require.Equal(t, want, partitionsOf(t, b, p))
	require.NoError(t, pgoutbox.MigrateTo(ctx, p, opts, 1))
	require.False(t, tableExists(t, p, opts.Schema, "outbox_archive"))
	require.False(t, tableExists(t, p, opts.Schema, dayNames("outbox", today, 1)[0]))
	opts.Partitions = 1
	require.NoError(t, pgoutbox.Migrate(ctx, p, opts))
	require.Equal(t, want, partitionsOf(t, b, p))
	_, err := pgoutbox.MigrationSQL(opts)
	require.Error(t, err)
	require.Contains(t, err.Error(), "ArchivePartitioned")
}

// TestPurgeParked: only parked entries whose park time is before the
// horizon are removed, oldest park first, at most limit; pending ones, a
// requeued one and one parked by hand without a park time are kept; a
// requeued entry parked again counts from its new park.
func TestPurgeParked(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	ids := appendN(t, b, p, "k", 6, func(int) string { return "" })
	l, err := b.AcquireLease(ctx, 0, "o", time.Minute)
	require.NoError(t, err)
	var fs []outbox.Failure
	for _, id := range ids[:5] {
		fs = append(fs, outbox.Failure{ID: id, Error: "boom", Park: true})
	}
	fs = append(fs, outbox.Failure{ID: ids[5], Error: "retry", Delay: time.Hour})
	require.NoError(t, b.MarkFailed(ctx, l, fs))
	table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
	var set int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE parked_at IS NOT NULL").Scan(&set))
	require.Equal(t, 5, set, "MarkFailed's park sets the park time")
	// k0 parked 3h ago, k1 2h ago, k2 90 minutes ago; k3 just now; k4
	// parked by hand, without a park time.
	_, err = p.Exec(ctx, "UPDATE "+table+` SET parked_at = now() - CASE id WHEN 'k000000' THEN interval '3 hours'
  WHEN 'k000001' THEN interval '2 hours' ELSE interval '90 minutes' END WHERE id IN ('k000000', 'k000001', 'k000002')`)
	require.NoError(t, err)
	_, err = p.Exec(ctx, "UPDATE "+table+" SET parked_at = NULL WHERE id = 'k000004'")
	require.NoError(t, err)
	// k2 is requeued: no longer parked.
	n, err := b.Requeue(ctx, ids[2])
	require.NoError(t, err)
	require.Equal(t, 1, n)

	horizon := dbNow(t, p).Add(-time.Hour)
	got, more, err := b.PurgeParked(ctx, horizon, 1)
	require.NoError(t, err)
	require.Equal(t, []string{ids[0]}, got, "oldest park first")
	require.True(t, more)
	got, more, err = b.PurgeParked(ctx, horizon, 10)
	require.NoError(t, err)
	require.Equal(t, []string{ids[1]}, got)
	require.False(t, more)
	got, _, err = b.PurgeParked(ctx, horizon, 10)
	require.NoError(t, err)
	require.Empty(t, got)

	var left []string
	rows, err := p.Query(ctx, "SELECT id FROM "+table+" ORDER BY id")
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, ids[2:], left)

	// k2 parked again: its park time starts over, so it is too new.
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: ids[2], Error: "again", Park: true}}))
	got, _, err = b.PurgeParked(ctx, horizon, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	// With a horizon in the future, every parked entry with a park time
	// goes: k2, k3; not k4 (no park time) nor k5 (pending).
	got, _, err = b.PurgeParked(ctx, time.Now().Add(time.Hour), 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{ids[2], ids[3]}, got)
	_, _, err = b.PurgeParked(ctx, horizon, 0)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
	require.NoError(t, b.Close())
	_, _, err = b.PurgeParked(ctx, horizon, 1)
	require.True(t, errors.Is(err, outbox.ErrClosed))
}

// TestArchivePartitionNamesOfLongTables: a table name of the longest
// length still gets distinct, valid partition names.
func TestArchivePartitionNamesOfLongTables(t *testing.T) {
	t.Parallel()
	table := strings.Repeat("t", 48)
	b, p := newBackend(t, extended, pgoutbox.Options{Table: table, Channel: "c", Archive: true, ArchivePartitioned: true})
	parts := partitionsOf(t, b, p)
	require.Len(t, parts, pgoutbox.ArchiveDaysAhead+2)
	for _, name := range parts {
		require.LessOrEqual(t, len(name), 63, name)
	}
	sendAll(t, b, p, "x", 2)
	require.Len(t, archivedIDs(t, b, p), 2)
}
