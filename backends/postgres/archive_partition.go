package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The partitioned archive (Options.ArchivePartitioned, PartitionArchive):
// "<table>_archive" PARTITION BY RANGE (sent_at), one partition per UTC
// day, a DEFAULT partition, and, after a conversion of a plain archive,
// that plain table as the partition of everything before its cut-off day.

// archivePart is one partition of a partitioned archive as the catalogue
// describes it.
type archivePart struct {
	// name is the partition's schema-qualified, quoted name.
	name string
	// def reports the DEFAULT partition.
	def bool
	// from and to bound the range [from, to); a zero from is MINVALUE, a
	// zero to MAXVALUE.
	from, to time.Time
}

// overlaps reports whether the range partition p shares a moment with
// [from, to).
func (p archivePart) overlaps(from, to time.Time) bool {
	return !p.def && (p.from.IsZero() || p.from.Before(to)) && (p.to.IsZero() || from.Before(p.to))
}

// partName is a partition's (or another derived object's) bare name:
// base+suffix when that fits PostgreSQL's 63 bytes, else base cut short
// with a hash of the whole base, so two long table names that share a
// prefix still get different names.
func partName(base, suffix string) string {
	if len(base)+len(suffix) <= maxIdentLen {
		return base + suffix
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(base))
	tag := fmt.Sprintf("_%08x", h.Sum32())
	cut := base[:maxIdentLen-len(suffix)-len(tag)]
	for !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + tag + suffix
}

// dayPartName is the bare name of the partition of day.
func dayPartName(table string, day time.Time) string {
	return partName(table+"_archive", "_p"+day.Format("20060102"))
}

// boundExpr parses pg_get_expr of a partition bound.
var boundExpr = regexp.MustCompile(`^FOR VALUES FROM \((.+)\) TO \((.+)\)$`)

// parseBound reads one bound value: MINVALUE, MAXVALUE (zero time) or a
// quoted timestamptz rendered with TimeZone UTC and DateStyle ISO.
func parseBound(s string) (time.Time, error) {
	if s == "MINVALUE" || s == "MAXVALUE" {
		return time.Time{}, nil
	}
	s = strings.Trim(s, "'")
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("pgoutbox: cannot read the archive partition bound %q", s)
}

// listPartitions reads the partitions of the archive, ordered by range
// (the DEFAULT partition last). tx must have TimeZone UTC and DateStyle
// ISO (setLocalTimeouts).
func listPartitions(ctx context.Context, tx pgx.Tx, n names) ([]archivePart, error) {
	rows, err := tx.Query(ctx, `SELECT format('%I.%I', ns.nspname, c.relname), pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_namespace ns ON ns.oid = c.relnamespace
WHERE i.inhparent = to_regclass($1)`, n.archive)
	if err != nil {
		return nil, err
	}
	var parts []archivePart
	for rows.Next() {
		var p archivePart
		var bound string
		if err := rows.Scan(&p.name, &bound); err != nil {
			return nil, err
		}
		if bound == "DEFAULT" {
			p.def = true
		} else if m := boundExpr.FindStringSubmatch(bound); m != nil {
			if p.from, err = parseBound(m[1]); err == nil {
				p.to, err = parseBound(m[2])
			}
			if err != nil {
				rows.Close()
				return nil, err
			}
		} else {
			rows.Close()
			return nil, fmt.Errorf("pgoutbox: the archive partition %s has a bound pgoutbox does not make: %s", p.name, bound)
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(parts, func(a, b archivePart) int {
		switch {
		case a.def != b.def:
			return boolIndex(a.def) - boolIndex(b.def)
		case a.from.Equal(b.from):
			return 0
		case a.from.IsZero() || (!b.from.IsZero() && a.from.Before(b.from)):
			return -1
		}
		return 1
	})
	return parts, nil
}

// ensureDayPartitions creates the day partitions of [first, last] (UTC
// day starts) that no partition covers, each under a savepoint: a day
// whose rows are in the DEFAULT partition already (SQLSTATE 23514) is
// logged and skipped.
func ensureDayPartitions(ctx context.Context, tx pgx.Tx, opts Options, n names, first, last time.Time) error {
	parts, err := listPartitions(ctx, tx, n)
	if err != nil {
		return err
	}
	for day := first; !day.After(last); day = day.AddDate(0, 0, 1) {
		next := day.AddDate(0, 0, 1)
		if slices.ContainsFunc(parts, func(p archivePart) bool { return p.overlaps(day, next) }) {
			continue
		}
		name := pgx.Identifier{opts.Schema, dayPartName(opts.Table, day)}.Sanitize()
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		_, err = sp.Exec(ctx, fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')",
			name, n.archive, day.Format(time.RFC3339), next.Format(time.RFC3339)))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23514" { // check_violation: the DEFAULT partition has rows of day
			if rerr := sp.Rollback(ctx); rerr != nil {
				return rerr
			}
			opts.Logger.Warn("pgoutbox: the archive's DEFAULT partition holds entries sent on a day that has no partition, so none can be made for it; they stay there and retention deletes them in batches. Make partitions ahead in time: run a relay with retention (it calls MaintainArchive every round)",
				"archive", n.archive, "day", day.Format(time.DateOnly), "default", pgx.Identifier{opts.Schema, partName(opts.Table+"_archive", "_default")}.Sanitize())
			continue
		}
		if err != nil {
			_ = sp.Rollback(ctx)
			return err
		}
		if err := sp.Commit(ctx); err != nil {
			return err
		}
	}
	return nil
}

// dropOldPartition drops the oldest range partition of parts whose whole
// range is before before, reporting its row count (reltuples, else
// count(*), just before the drop)
// and whether it dropped one. It locks the partition first (ACCESS
// EXCLUSIVE, which a reader of it blocks), then DROP TABLE locks the
// archive; tx's lock_timeout bounds both waits.
func dropOldPartition(ctx context.Context, tx pgx.Tx, parts []archivePart, before time.Time) (int64, bool, error) {
	i := slices.IndexFunc(parts, func(p archivePart) bool { return !p.def && !p.to.IsZero() && !p.to.After(before) })
	if i < 0 {
		return 0, false, nil
	}
	p := parts[i]
	// Under a savepoint: a janitor that overlaps this one for a moment
	// (the SPI allows it) may drop the partition first, and then this one
	// finds it gone (42P01) and reports a drop of nothing.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	// The row count: the catalogue's estimate (reltuples, set by the last
	// VACUUM or ANALYZE of the partition) when there is one, else count(*)
	// with no statement_timeout (a day of a busy outbox may take longer
	// than 30 seconds to count; the count blocks nobody).
	var count int64
	err = sp.QueryRow(ctx, `SELECT coalesce((SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass($1) AND reltuples >= 0), -1)`, p.name).Scan(&count)
	if err == nil && count < 0 {
		err = sp.QueryRow(ctx, `WITH off AS MATERIALIZED (SELECT set_config('statement_timeout', '0', true))
SELECT count(*) FROM `+p.name+`, off`).Scan(&count)
		if err == nil {
			_, err = sp.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", millis(retentionStatementTimeout))
		}
	}
	if err == nil {
		_, err = sp.Exec(ctx, "LOCK TABLE "+p.name+" IN ACCESS EXCLUSIVE MODE")
	}
	if err == nil {
		_, err = sp.Exec(ctx, "DROP TABLE "+p.name)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: dropped by another call
		return 0, true, sp.Rollback(ctx)
	}
	if err != nil {
		return 0, false, err
	}
	return count, true, sp.Commit(ctx)
}

// archiveCutoffDays is how many days after the database's current UTC day
// the plain archive that PartitionArchive attaches covers: its range ends
// at the start of the day after tomorrow, so MarkSent statements that
// still insert into it under its old name while the conversion runs, and
// entries sent until then, fit its range.
const archiveCutoffDays = 2

// PartitionArchive makes the archive of opts.Schema and opts.Table
// partitioned by day (see Options.ArchivePartitioned), converting a plain
// archive while relays keep archiving into it:
//
//  1. a CHECK (sent_at < cut-off) NOT VALID is added to the plain archive
//     (a short ACCESS EXCLUSIVE lock) and validated (a scan that blocks
//     no insert), where the cut-off is the start of the UTC day after
//     tomorrow by the database's clock;
//  2. an index on id is built CONCURRENTLY on it (blocking no insert), to
//     match the partitioned archive's;
//  3. in one short transaction that locks the plain archive (ACCESS
//     EXCLUSIVE), it is renamed "<table>_archive_upto_YYYYMMDD" (the
//     cut-off day), loses its primary key (an ID is archived once per
//     delivery from then on), and becomes, without a scan, the partition
//     FROM (MINVALUE) TO (cut-off) of a new partitioned
//     "<table>_archive", which also gets its DEFAULT partition and the
//     day partitions from the cut-off to ArchiveDaysAhead days after
//     today. An empty plain archive is dropped instead of attached.
//
// Each lock wait is bounded by opts.ArchiveLockTimeout; a lock not granted
// in time is tried again after a pause as long as it takes, until ctx is
// done. MarkSent of a running relay waits for that lock for at most that
// long, and its first MarkSent after step 3 fails once (its statement was
// for a plain archive) and switches to the partitioned archive's
// statement; the relay retries the entries. Retention deletes the
// attached plain archive's rows in batches until its whole range is past
// the horizon, then drops it. An archive that is already partitioned only
// gets its missing day partitions. Running it again after a failure
// resumes. [MigrateTo] with Options.ArchivePartitioned calls it.
func PartitionArchive(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if pool == nil {
		return errors.New("pgoutbox: PartitionArchive: pool is nil; pass a *pgxpool.Pool from pgxpool.New")
	}
	c := converter{pool: pool, opts: opts, n: newNames(opts.Schema, opts.Table)}
	if err := c.run(ctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return fmt.Errorf("pgoutbox: PartitionArchive: the archive %s does not exist: create the outbox first (pgoutbox.Migrate or \"outbox migrate up\"): %w", c.n.archive, err)
		}
		return fmt.Errorf("pgoutbox: PartitionArchive %s: %w", c.n.archive, err)
	}
	return nil
}

// converter runs one PartitionArchive.
type converter struct {
	pool *pgxpool.Pool
	opts Options
	n    names
}

// bare returns the bare quoted name of a derived object.
func (c converter) bare(suffix string) string {
	return pgx.Identifier{partName(c.opts.Table+"_archive", suffix)}.Sanitize()
}

// qualified returns the schema-qualified quoted name of a derived table.
func (c converter) qualified(suffix string) string {
	return pgx.Identifier{c.opts.Schema, partName(c.opts.Table+"_archive", suffix)}.Sanitize()
}

func (c converter) run(ctx context.Context) error {
	partitioned, err := readArchiveShape(ctx, c.pool, c.n)
	if err != nil {
		return err
	}
	var today time.Time
	if err := c.pool.QueryRow(ctx, "SELECT now()").Scan(&today); err != nil {
		return err
	}
	today = utcDay(today)
	if partitioned {
		return c.withLock(ctx, 0, func(tx pgx.Tx) error {
			return ensureDayPartitions(ctx, tx, c.opts, c.n, today, today.AddDate(0, 0, ArchiveDaysAhead))
		})
	}
	var exists bool
	if err := c.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", c.n.archive).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return &pgconn.PgError{Code: "42P01", Message: "relation " + c.n.archive + " does not exist"}
	}
	cutoff := today.AddDate(0, 0, archiveCutoffDays)
	check := c.bare("_upto_check")
	// 1. The CHECK that lets ATTACH PARTITION skip its scan.
	if err := c.withLock(ctx, 0, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s, ADD CONSTRAINT %s CHECK (sent_at < '%s') NOT VALID",
			c.n.archive, check, check, cutoff.Format(time.RFC3339)))
		return err
	}); err != nil {
		return err
	}
	if err := c.withLock(ctx, 0, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s", c.n.archive, check))
		return err
	}); err != nil {
		return err
	}
	// 2. The index on id the partitioned archive's index attaches.
	if err := c.buildIDIndex(ctx); err != nil {
		return err
	}
	// 3. The swap.
	return c.withLock(ctx, retentionStatementTimeout, func(tx pgx.Tx) error { return c.swap(ctx, tx, today, cutoff) })
}

// buildIDIndex builds "<table>_archive_upto_id_idx" on the plain archive
// CONCURRENTLY, dropping an invalid one a failed run left first.
func (c converter) buildIDIndex(ctx context.Context) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The session's lock_timeout is reset before the connection goes back.
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "RESET lock_timeout")
		conn.Release()
	}()
	idx := c.qualified("_upto_id_idx")
	var invalid bool
	if err := conn.QueryRow(ctx, "SELECT coalesce((SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)), false)", idx).Scan(&invalid); err != nil {
		return err
	}
	stmts := []string{"SET lock_timeout = " + millis(c.opts.ArchiveLockTimeout)}
	if invalid {
		stmts = append(stmts, "DROP INDEX CONCURRENTLY IF EXISTS "+idx)
	}
	stmts = append(stmts, fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (id)", c.bare("_upto_id_idx"), c.n.archive))
	for _, s := range stmts {
		for {
			_, err := conn.Exec(ctx, s)
			if !isLockTimeout(err) {
				if err != nil {
					return err
				}
				break
			}
			if err := pause(ctx, c.opts.ArchiveLockTimeout); err != nil {
				return err
			}
		}
	}
	return nil
}

// swap turns the plain archive into the partition before cutoff of a new
// partitioned archive (or drops it when empty), in tx.
func (c converter) swap(ctx context.Context, tx pgx.Tx, today, cutoff time.Time) error {
	if _, err := tx.Exec(ctx, "LOCK TABLE "+c.n.archive+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return err
	}
	var empty bool
	if err := tx.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+c.n.archive+")").Scan(&empty); err != nil {
		return err
	}
	uptoSuffix := "_upto_" + cutoff.Format("20060102")
	stmts := []string{
		fmt.Sprintf("ALTER TABLE %s RENAME TO %s", c.n.archive, c.bare(uptoSuffix)),
		fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s", c.qualified(uptoSuffix), pgx.Identifier{c.opts.Table + "_archive_pkey"}.Sanitize()),
		fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS) PARTITION BY RANGE (sent_at)", c.n.archive, c.qualified(uptoSuffix)),
		fmt.Sprintf("CREATE INDEX %s ON %s (id)", c.bare("_id_pidx"), c.n.archive),
		fmt.Sprintf("CREATE INDEX %s ON %s (sent_at)", c.bare("_sent_pidx"), c.n.archive),
	}
	first := today
	if empty {
		stmts = append(stmts, "DROP TABLE "+c.qualified(uptoSuffix))
	} else {
		stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (MINVALUE) TO ('%s')",
			c.n.archive, c.qualified(uptoSuffix), cutoff.Format(time.RFC3339)))
		first = cutoff
	}
	stmts = append(stmts, fmt.Sprintf("CREATE TABLE %s PARTITION OF %s DEFAULT", c.qualified("_default"), c.n.archive))
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return err
		}
	}
	last := today.AddDate(0, 0, ArchiveDaysAhead)
	if first.After(last) {
		return nil
	}
	return ensureDayPartitions(ctx, tx, c.opts, c.n, first, last)
}

// withLock runs fn in a transaction with the retention timeouts (stmt 0:
// no statement_timeout), again after a pause each time a lock is not
// granted in time, until ctx is done.
func (c converter) withLock(ctx context.Context, stmt time.Duration, fn func(pgx.Tx) error) error {
	for {
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			if err := setLocalTimeouts(ctx, tx, c.opts.ArchiveLockTimeout, stmt); err != nil {
				return err
			}
			return fn(tx)
		})
		if !isLockTimeout(err) {
			return err
		}
		if perr := pause(ctx, c.opts.ArchiveLockTimeout); perr != nil {
			return fmt.Errorf("%w (the last try: %v)", perr, err)
		}
	}
}

// isLockTimeout reports SQLSTATE 55P03 (lock_not_available).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// pause waits d or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
