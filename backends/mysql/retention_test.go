package mysqloutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// insertArchived inserts archived rows old1..oldN sent 3 days ago plus n
// seconds (old1 the oldest), and one row "recent" sent now.
func insertArchived(t testing.TB, db *sql.DB, n int) {
	t.Helper()
	exec(t, db, "SET SESSION max_recursive_iterations = 100000")
	exec(t, db, fmt.Sprintf("INSERT INTO `outbox_archive` (seq, id, `partition`, topic, `key`, created_at, attempts, last_error, sent_at) "+
		"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < %d) "+
		"SELECT n, CONCAT('old', n), 0, 't', '', UTC_TIMESTAMP(6), 0, '', UTC_TIMESTAMP(6) - INTERVAL 3 DAY + INTERVAL n SECOND FROM s", n))
	exec(t, db, "INSERT INTO `outbox_archive` (seq, id, `partition`, topic, `key`, created_at, attempts, last_error, sent_at) "+
		"VALUES (0, 'recent', 0, 't', '', UTC_TIMESTAMP(6), 0, '', UTC_TIMESTAMP(6))")
}

// archivedIDs lists the archive's IDs, oldest send first.
func archivedIDs(t testing.TB, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT id FROM `outbox_archive` ORDER BY sent_at")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func TestPurgeArchiveBatchBoundedOldestFirst(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1, Archive: true})
	ctx := context.Background()
	if _, ok, err := b.OldestArchived(ctx); ok || err != nil {
		t.Fatalf("OldestArchived of an empty archive: ok %v, %v", ok, err)
	}
	if n, more, err := b.PurgeArchiveBatch(ctx, time.Now(), 10); n != 0 || more || err != nil {
		t.Fatalf("PurgeArchiveBatch of an empty archive: %d, %v, %v; want 0, false, nil", n, more, err)
	}
	insertArchived(t, db, 25)
	var oldest int64
	if err := db.QueryRow("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', sent_at) FROM `outbox_archive` WHERE id = 'old1'").Scan(&oldest); err != nil {
		t.Fatal(err)
	}
	if sent, ok, err := b.OldestArchived(ctx); !ok || err != nil || sent.UnixMicro() != oldest {
		t.Fatalf("OldestArchived = %v, %v, %v; want old1's sent_at %v", sent, ok, err, time.UnixMicro(oldest).UTC())
	}
	before := time.Now().Add(-24 * time.Hour)
	for i, want := range []struct {
		n    int64
		more bool
	}{{10, true}, {10, true}, {5, false}, {0, false}} {
		n, more, err := b.PurgeArchiveBatch(ctx, before, 10)
		if err != nil || n != want.n || more != want.more {
			t.Fatalf("batch %d: %d, %v, %v; want %d, %v", i, n, more, err, want.n, want.more)
		}
		if i == 0 {
			var wantLeft []string
			for k := 11; k <= 25; k++ {
				wantLeft = append(wantLeft, fmt.Sprintf("old%d", k))
			}
			if got := archivedIDs(t, db); !slices.Equal(got, append(wantLeft, "recent")) {
				t.Fatalf("after the first batch the archive holds %q: the 10 oldest should be gone", got)
			}
		}
	}
	if got := archivedIDs(t, db); !slices.Equal(got, []string{"recent"}) {
		t.Fatalf("archive after the purge: %q, want [recent]", got)
	}
	if _, _, err := b.PurgeArchiveBatch(ctx, before, 0); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("limit 0: %v", err)
	}
	if err := b.MaintainArchive(ctx, time.Now()); err != nil {
		t.Fatalf("MaintainArchive: %v", err)
	}
	b.Close()
	_, _, err1 := b.PurgeArchiveBatch(ctx, before, 1)
	_, _, err2 := b.OldestArchived(ctx)
	_, _, err3 := b.PurgeParked(ctx, before, 1)
	_, err4 := b.Health(ctx)
	for i, err := range []error{err1, err2, err3, err4, b.MaintainArchive(ctx, time.Now())} {
		if !errors.Is(err, outbox.ErrClosed) {
			t.Fatalf("call %d after Close: %v, want ErrClosed", i, err)
		}
	}
}

// TestPurgeArchiveBatchSkipsAHeldRow: a row another transaction holds
// locked is skipped, not waited for: the call removes the others and
// returns, although the holder keeps its lock past the call (a wait would
// end in a lock wait timeout error after mysqloutbox.PurgeLockWait). The
// pool connection the call used gets its own innodb_lock_wait_timeout
// back.
func TestPurgeArchiveBatchSkipsAHeldRow(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1, Archive: true})
	ctx := context.Background()
	db.SetMaxOpenConns(1) // one session: the one whose setting is checked
	exec(t, db, "SET SESSION innodb_lock_wait_timeout = 7")
	insertArchived(t, db, 3)

	name := databaseOf(t, db)
	other, err := sql.Open("mysql", testenv.MySQLDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	holder, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback() //nolint:errcheck
	var id string
	if err := holder.QueryRow("SELECT id FROM `outbox_archive` WHERE id = 'old1' FOR UPDATE").Scan(&id); err != nil {
		t.Fatal(err)
	}

	n, more, err := b.PurgeArchiveBatch(ctx, time.Now().Add(-time.Hour), 10)
	if err != nil || n != 2 || more {
		t.Fatalf("PurgeArchiveBatch beside a held row: %d, %v, %v; want 2 (old2, old3), false, nil", n, more, err)
	}
	if got := archivedIDs(t, db); !slices.Equal(got, []string{"old1", "recent"}) {
		t.Fatalf("archive: %q, want the held old1 and recent", got)
	}
	var wait int
	if err := db.QueryRow("SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&wait); err != nil || wait != 7 {
		t.Fatalf("the pool connection's innodb_lock_wait_timeout after the purge: %d, %v; want its own 7 back", wait, err)
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, err := b.PurgeArchive(ctx, time.Now().Add(-time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("PurgeArchive after the holder committed: %d, %v; want 1", n, err)
	}
}

func databaseOf(t testing.TB, db *sql.DB) string {
	t.Helper()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// parkedAt reads the park time of id (NULL: zero, false).
func parkedAt(t testing.TB, db *sql.DB, id string) (time.Time, bool) {
	t.Helper()
	var us sql.NullInt64
	if err := db.QueryRow("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', parked_at) FROM `outbox` WHERE id = ?", id).Scan(&us); err != nil {
		t.Fatalf("park time of %s: %v", id, err)
	}
	return time.UnixMicro(us.Int64), us.Valid
}

func storedIDs(t testing.TB, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT id FROM `outbox` ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func TestPurgeParked(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2})
	ctx := context.Background()
	insertRows(t, db,
		row{id: "old-a", partition: 0}, row{id: "old-b", partition: 1}, row{id: "old-c", partition: 0},
		row{id: "young", partition: 1}, row{id: "requeued", partition: 0}, row{id: "pending", partition: 1},
		row{id: "unstamped", partition: 0})
	for p, park := range map[int][]string{0: {"old-a", "old-c", "requeued", "unstamped"}, 1: {"old-b", "young"}} {
		l := takeLease(t, db, p, "relay")
		var fs []outbox.Failure
		for _, id := range park {
			fs = append(fs, outbox.Failure{ID: id, Error: "boom", Park: true})
		}
		if err := b.MarkFailed(ctx, l, fs); err != nil {
			t.Fatal(err)
		}
	}
	if at, ok := parkedAt(t, db, "young"); !ok || time.Since(at).Abs() > time.Hour {
		t.Fatalf("the park time MarkFailed set: %v, %v; want about now", at, ok)
	}
	if _, ok := parkedAt(t, db, "pending"); ok {
		t.Fatal("a pending entry has a park time")
	}
	// Parked two days ago, oldest first: old-b (partition 1), old-a, old-c.
	exec(t, db, "UPDATE `outbox` SET parked_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY WHERE id = 'old-b'")
	exec(t, db, "UPDATE `outbox` SET parked_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY + INTERVAL 1 MINUTE WHERE id = 'old-a'")
	exec(t, db, "UPDATE `outbox` SET parked_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY + INTERVAL 2 MINUTE WHERE id IN ('old-c', 'requeued')")
	exec(t, db, "UPDATE `outbox` SET parked_at = NULL WHERE id = 'unstamped'")
	if n, err := b.Requeue(ctx, "requeued"); err != nil || n != 1 {
		t.Fatalf("Requeue: %d, %v", n, err)
	}
	if _, ok := parkedAt(t, db, "requeued"); ok {
		t.Fatal("a requeued entry kept its park time")
	}

	before := time.Now().Add(-24 * time.Hour)
	// The row without a park time comes first and is given one, not removed.
	got, more, err := b.PurgeParked(ctx, before, 1)
	if err != nil || len(got) != 0 || !more {
		t.Fatalf("first call: %q, %v, %v; want the unstamped row stamped, nothing removed, more", got, more, err)
	}
	if at, ok := parkedAt(t, db, "unstamped"); !ok || time.Since(at).Abs() > time.Hour {
		t.Fatalf("park time given to unstamped: %v, %v; want about now", at, ok)
	}
	if removed, want := purgeParkedAll(t, b, before, 2), []string{"old-b", "old-a", "old-c"}; !slices.Equal(removed, want) {
		t.Fatalf("removed %q, want %q (oldest park first)", removed, want)
	}
	if got, want := storedIDs(t, db), []string{"pending", "requeued", "unstamped", "young"}; !slices.Equal(got, want) {
		t.Fatalf("left: %q, want %q", got, want)
	}
	// Everything parked now or before: the recent parks, never the
	// pending or requeued ones.
	got, _, err = b.PurgeParked(ctx, time.Now().Add(time.Hour), 100)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"unstamped", "young"}) {
		t.Fatalf("purge of all parked: %q, %v; want [unstamped young]", got, err)
	}
	if got, want := storedIDs(t, db), []string{"pending", "requeued"}; !slices.Equal(got, want) {
		t.Fatalf("left: %q, want %q", got, want)
	}
	if _, _, err := b.PurgeParked(ctx, before, 0); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("limit 0: %v", err)
	}
}

// purgeParkedAll calls PurgeParked with limit until it reports no more,
// checking each call's bound, and returns what it removed.
func purgeParkedAll(t testing.TB, b *mysqloutbox.Backend, before time.Time, limit int) []string {
	t.Helper()
	var removed []string
	for i := 0; ; i++ {
		got, more, err := b.PurgeParked(context.Background(), before, limit)
		if err != nil || len(got) > limit {
			t.Fatalf("PurgeParked: %q, %v", got, err)
		}
		removed = append(removed, got...)
		if !more {
			return removed
		}
		if i > 20 {
			t.Fatal("PurgeParked keeps reporting more")
		}
	}
}

// TestParkCorruptSetsParkTime: the fetch's park of a row it cannot publish
// records the park time too.
func TestParkCorruptSetsParkTime(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db, row{id: "bad", headers: []byte{0xff}})
	l := takeLease(t, db, 0, "relay")
	batch, err := b.FetchBatch(ctx, l, 10)
	if err != nil || len(batch.Parked) != 1 {
		t.Fatalf("FetchBatch: %+v, %v; want bad parked", batch, err)
	}
	if at, ok := parkedAt(t, db, "bad"); !ok || time.Since(at).Abs() > time.Hour {
		t.Fatalf("park time of a corrupt row: %v, %v", at, ok)
	}
	got, _, err := b.PurgeParked(ctx, time.Now().Add(time.Hour), 10)
	if err != nil || !slices.Equal(got, []string{"bad"}) {
		t.Fatalf("PurgeParked: %q, %v", got, err)
	}
}

// openSnapshot opens a transaction with a read view on a connection of
// its own and returns the connection's thread ID; the transaction is
// rolled back when t ends.
func openSnapshot(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var thread int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&thread); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT"); err != nil {
		t.Fatal(err)
	}
	// A write makes it a read-write transaction, which every server lists.
	if _, err := conn.ExecContext(ctx, "INSERT INTO `outbox_hold` (one, reason, since) VALUES (1, 'test', UTC_TIMESTAMP(6))"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		conn.Close()
	})
	return thread
}

// waitHealth calls Health until ok accepts it (watchdog: 30 s).
func waitHealth(t testing.TB, b *mysqloutbox.Backend, ok func(outbox.Health) bool) outbox.Health {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := b.Health(context.Background())
		if err != nil {
			t.Fatalf("Health: %v", err)
		}
		if ok(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("Health never showed what the test waits for: %+v", h)
		}
		// Slower than InnoDB refreshes INNODB_TRX for its readers (only
		// when it was not read for 100 ms): faster polling would keep
		// the transactions it lists stale.
		time.Sleep(250 * time.Millisecond)
	}
}

func findWarning(h outbox.Health, code, object string) *outbox.HealthWarning {
	for i, w := range h.Warnings {
		if w.Code == code && (object == "" || w.Object == object) {
			return &h.Warnings[i]
		}
	}
	return nil
}

func TestHealth(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2, Archive: true})
	ctx := context.Background()
	name := databaseOf(t, db)
	insertRows(t, db, row{id: "a"}, row{id: "b", partition: 1})
	exec(t, db, "ANALYZE TABLE `outbox`")
	h, err := b.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Tables) != 2 || h.Tables[0].Name != name+".outbox" || h.Tables[1].Name != name+".outbox_archive" {
		t.Fatalf("tables: %+v; want %s.outbox and %s.outbox_archive", h.Tables, name, name)
	}
	var data, index int64
	if err := db.QueryRow("SELECT DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox'").Scan(&data, &index); err != nil {
		t.Fatal(err)
	}
	if o := h.Tables[0]; o.Bytes != data+index || o.Bytes <= 0 || o.LiveRows != 2 || o.DeadRows != -1 || o.Vacuums != -1 || !o.LastVacuum.IsZero() {
		t.Fatalf("outbox table: %+v; want %d bytes, 2 live rows (after ANALYZE), -1 dead rows and vacuums", o, data+index)
	}
	if h.Memory != nil {
		t.Fatalf("Memory: %+v, want nil", h.Memory)
	}

	// A transaction open longer than the bound is named, with its thread.
	thread := openSnapshot(t, db)
	object := fmt.Sprintf("thread %d", thread)
	tight, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{LongTransaction: time.Millisecond, PurgeLag: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer tight.Close()
	h = waitHealth(t, tight, func(h outbox.Health) bool { return findWarning(h, "long-transaction", object) != nil })
	w := findWarning(h, "long-transaction", object)
	if !strings.Contains(w.Message, fmt.Sprintf("KILL %d", thread)) || !strings.Contains(w.Message, "database "+name) {
		t.Fatalf("warning: %+v; want the KILL that ends it and the database", w)
	}
	if findWarning(h, "purge-lag", "") != nil {
		t.Fatal("purge-lag reported with the check off")
	}
	// The default bound (5 minutes) does not name a young transaction.
	if h, err := b.Health(ctx); err != nil || findWarning(h, "long-transaction", object) != nil {
		t.Fatalf("Health with the default bound: %+v, %v", h, err)
	}

	// Deletes the open read view may still need stay in the history list:
	// a bound of 1 reports the purge lag.
	exec(t, db, "DELETE FROM `outbox` WHERE id = 'a'")
	lag, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{PurgeLag: 1, LongTransaction: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer lag.Close()
	h = waitHealth(t, lag, func(h outbox.Health) bool { return findWarning(h, "purge-lag", "server") != nil })
	if w := findWarning(h, "purge-lag", "server"); !strings.Contains(w.Message, "INNODB_TRX") {
		t.Fatalf("purge-lag warning without its fix: %+v", w)
	}
	if findWarning(h, "long-transaction", "") != nil {
		t.Fatal("long-transaction reported with the check off")
	}
}

// TestHealthWithoutProcess: a user without the PROCESS privilege gets the
// tables and a warning that says which check is off and how to grant it.
func TestHealthWithoutProcess(t *testing.T) {
	t.Parallel()
	_, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	name := databaseOf(t, db)
	user := "np_" + name[len(name)-8:]
	for _, host := range []string{"%", "localhost"} {
		exec(t, db, fmt.Sprintf("CREATE USER '%s'@'%s' IDENTIFIED BY 'pw'", user, host))
		exec(t, db, fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%s'", name, user, host))
		t.Cleanup(func() { _, _ = db.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%s'", user, host)) })
	}
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, "pw"
	limited, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	b, err := mysqloutbox.New(ctx, limited, mysqloutbox.Options{LongTransaction: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	openSnapshot(t, db)
	h, err := b.Health(ctx)
	if err != nil {
		t.Fatalf("Health without PROCESS: %v", err)
	}
	if len(h.Tables) != 2 || h.Tables[0].Bytes <= 0 {
		t.Fatalf("tables without PROCESS: %+v", h.Tables)
	}
	w := findWarning(h, "health-unchecked", "")
	if w == nil || !strings.Contains(w.Message, "long-transaction check") || !strings.Contains(w.Message, "GRANT PROCESS") {
		t.Fatalf("warnings without PROCESS: %+v; want health-unchecked naming the long-transaction check and the grant", h.Warnings)
	}
	if findWarning(h, "long-transaction", "") != nil {
		t.Fatalf("a long transaction reported without PROCESS: %+v", h.Warnings)
	}
}

// TestMigrationParkedAt: migration 002 gives the rows parked before it
// the migration's time and pending rows none; a run cut after its ALTER
// runs again (the duplicate column counts as done); down drops the column;
// New refuses an outbox at version 1 with the advice to migrate.
func TestMigrationParkedAt(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	opts := mysqloutbox.Options{Partitions: 1}
	if err := mysqloutbox.MigrateTo(ctx, db, opts, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := mysqloutbox.New(ctx, db, opts); err == nil || !strings.Contains(err.Error(), "run mysqloutbox.Migrate") {
		t.Fatalf("New on version 1: %v; want the advice to run Migrate", err)
	}
	insertRows(t, db, row{id: "parked"}, row{id: "pending"})
	exec(t, db, "UPDATE `outbox` SET state = 'parked' WHERE id = 'parked'")
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	if at, ok := parkedAt(t, db, "parked"); !ok || time.Since(at).Abs() > time.Hour {
		t.Fatalf("park time of a row parked before 002: %v, %v; want the migration's", at, ok)
	}
	if _, ok := parkedAt(t, db, "pending"); ok {
		t.Fatal("a pending row got a park time")
	}
	// Cut after the ALTER: the version is not recorded, the column exists.
	exec(t, db, "DELETE FROM `outbox_migrations` WHERE version = 2")
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		t.Fatalf("Migrate again after a cut run: %v", err)
	}
	if err := mysqloutbox.MigrateTo(ctx, db, opts, 1); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox' AND COLUMN_NAME = 'parked_at'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("parked_at after down: %d, %v", n, err)
	}
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	b, err := mysqloutbox.New(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}
