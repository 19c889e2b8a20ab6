package pgoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// healthWait bounds every wait of the health tests for statistics to
// arrive (PostgreSQL flushes a backend's table counters about once a
// second when it goes idle). A watchdog, not a measured bound.
const healthWait = 60 * time.Second

// waitHealth calls Health until ok accepts the result, failing after
// healthWait with the last result.
func waitHealth(t *testing.T, b *pgoutbox.Backend, what string, ok func(outbox.Health) bool) outbox.Health {
	t.Helper()
	deadline := time.Now().Add(healthWait)
	for {
		h, err := b.Health(t.Context())
		require.NoError(t, err)
		if ok(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; last Health: %+v", healthWait, what, h)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// warnings returns the warnings of h with code (and object, unless "*").
func warnings(h outbox.Health, code, object string) []outbox.HealthWarning {
	var ws []outbox.HealthWarning
	for _, w := range h.Warnings {
		if w.Code == code && (object == "*" || w.Object == object) {
			ws = append(ws, w)
		}
	}
	return ws
}

func appendHealthN(t *testing.T, p *pgxpool.Pool, b *pgoutbox.Backend, n int) {
	t.Helper()
	es := make([]outbox.Entry, n)
	for i := range es {
		es[i] = outbox.Entry{Topic: "t", Key: fmt.Sprint(i % 7), Payload: []byte("payload")}
	}
	require.NoError(t, pgx.BeginFunc(t.Context(), p, func(tx pgx.Tx) error { return b.AppendInTx(t.Context(), tx, es...) }))
}

func TestHealthFigures(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{Archive: true})
	schema := b.Options().Schema
	h, err := b.Health(t.Context())
	require.NoError(t, err)
	require.Len(t, h.Tables, 2, "the outbox table and its archive")
	require.Equal(t, schema+".outbox", h.Tables[0].Name)
	require.Equal(t, schema+".outbox_archive", h.Tables[1].Name)
	for _, tb := range h.Tables {
		require.Positive(t, tb.Bytes, "%s: an empty table still has its indexes' metapages", tb.Name)
	}

	const n = 300
	appendHealthN(t, p, b, n)
	ctx := t.Context()
	outboxTable := pgx.Identifier{schema, "outbox"}.Sanitize()
	_, err = p.Exec(ctx, "DELETE FROM "+outboxTable)
	require.NoError(t, err)
	h = waitHealth(t, b, "the deleted rows to show as dead", func(h outbox.Health) bool { return h.Tables[0].DeadRows >= n })
	require.Positive(t, h.Tables[0].Bytes)
	require.Zero(t, h.Tables[0].Vacuums, "nothing vacuumed the new table yet")
	require.True(t, h.Tables[0].LastVacuum.IsZero())

	// A vacuum removes the dead rows only once no snapshot older than
	// the DELETE is left on the server, and tests running next to this one
	// (TestHealthXminHorizonHeld, for one) hold such snapshots for a
	// moment: vacuum again until the rows are gone, as autovacuum would.
	h = waitHealth(t, b, "a vacuum to remove the dead rows", func(h outbox.Health) bool {
		if h.Tables[0].Vacuums >= 1 && h.Tables[0].DeadRows < n {
			return true
		}
		_, err := p.Exec(ctx, "VACUUM "+outboxTable)
		require.NoError(t, err)
		return false
	})
	require.WithinDuration(t, time.Now(), h.Tables[0].LastVacuum, 10*time.Minute, "LastVacuum is the vacuum just run (clocks of one machine)")
	require.Equal(t, int64(0), h.Tables[1].DeadRows, "the archive was not touched")
}

func TestHealthKeySequenceTable(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{KeySequence: true})
	h, err := b.Health(t.Context())
	require.NoError(t, err)
	require.Len(t, h.Tables, 3)
	require.Equal(t, b.Options().Schema+".outbox_keyseq", h.Tables[2].Name)
}

// TestHealthAutovacuumOff checks the warning against the server's
// settings: the machine's shared server runs with autovacuum = off, so
// there the warning must be present (TestHealthPrivateCluster checks its
// absence on a server with autovacuum on).
func TestHealthAutovacuumOff(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{})
	var autovacuum, trackCounts string
	require.NoError(t, p.QueryRow(t.Context(), "SELECT current_setting('autovacuum'), current_setting('track_counts')").Scan(&autovacuum, &trackCounts))
	h, err := b.Health(t.Context())
	require.NoError(t, err)
	ws := warnings(h, pgoutbox.WarnAutovacuumOff, "")
	if autovacuum == "on" && trackCounts == "on" {
		require.Empty(t, ws, "autovacuum and track_counts are on")
		return
	}
	require.Len(t, ws, 1)
	msg := ws[0].Message
	t.Log(msg)
	for _, want := range []string{"= off", "ALTER SYSTEM SET", "pg_reload_conf()", "dead rows", b.Options().Schema + ".outbox"} {
		require.Contains(t, msg, want)
	}
	if autovacuum == "off" {
		require.Contains(t, msg, "ALTER SYSTEM SET autovacuum = on;")
	}
}

func TestHealthTableAutovacuumDisabled(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{})
	ctx := t.Context()
	schema := b.Options().Schema
	outboxName, archiveName := schema+".outbox", schema+".outbox_archive"
	h, err := b.Health(ctx)
	require.NoError(t, err)
	require.Empty(t, warnings(h, pgoutbox.WarnTableAutovacuumDisabled, "*"), "the migration leaves autovacuum enabled")

	outboxTable := pgx.Identifier{schema, "outbox"}.Sanitize()
	archiveTable := pgx.Identifier{schema, "outbox_archive"}.Sanitize()
	_, err = p.Exec(ctx, "ALTER TABLE "+outboxTable+" SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	// "off" parses as false too, and a TOAST table has its own setting.
	_, err = p.Exec(ctx, "ALTER TABLE "+archiveTable+" SET (toast.autovacuum_enabled = off)")
	require.NoError(t, err)
	h, err = b.Health(ctx)
	require.NoError(t, err)
	ws := warnings(h, pgoutbox.WarnTableAutovacuumDisabled, outboxName)
	require.Len(t, ws, 1, "%+v", h.Warnings)
	// The fix names the table as format('%I.%I') does: quoted only where
	// needed (the test schema's name needs no quotes).
	require.Contains(t, ws[0].Message, "ALTER TABLE "+outboxName+" RESET (autovacuum_enabled);")
	require.Contains(t, ws[0].Message, "dead rows")
	ws = warnings(h, pgoutbox.WarnTableAutovacuumDisabled, archiveName)
	require.Len(t, ws, 1, "%+v", h.Warnings)
	require.Contains(t, ws[0].Message, "TOAST")
	require.Contains(t, ws[0].Message, "ALTER TABLE "+archiveName+" RESET (toast.autovacuum_enabled);")

	// autovacuum_enabled = true is no warning; the fixes clear them.
	_, err = p.Exec(ctx, "ALTER TABLE "+outboxTable+" SET (autovacuum_enabled = true)")
	require.NoError(t, err)
	_, err = p.Exec(ctx, "ALTER TABLE "+archiveTable+" RESET (toast.autovacuum_enabled)")
	require.NoError(t, err)
	h, err = b.Health(ctx)
	require.NoError(t, err)
	require.Empty(t, warnings(h, pgoutbox.WarnTableAutovacuumDisabled, "*"))
}

// holdSnapshot opens a REPEATABLE READ transaction on its own connection
// of p, named appName, that has taken its snapshot, and returns its pid;
// the transaction ends (rolled back) when release is called or t ends.
func holdSnapshot(t *testing.T, p *pgxpool.Pool, appName string) (pid uint32, release func()) {
	t.Helper()
	ctx := t.Context()
	conn, err := p.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET application_name = '"+appName+"'")
	require.NoError(t, err)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	var one int
	require.NoError(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one)) // takes the snapshot
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		_ = tx.Rollback(context.Background())
		_, _ = conn.Exec(context.Background(), "RESET application_name")
		conn.Release()
	}
	t.Cleanup(release)
	return conn.Conn().PgConn().PID(), release
}

func randomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func TestHealthXminHorizonHeld(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{XminHorizonWarning: time.Millisecond})
	app := randomName("pghealth-test-")
	pid, release := holdSnapshot(t, p, app)
	object := fmt.Sprintf("pid %d", pid)
	h := waitHealth(t, b, "the held snapshot to be reported", func(h outbox.Health) bool {
		return len(warnings(h, pgoutbox.WarnXminHorizonHeld, object)) == 1
	})
	msg := warnings(h, pgoutbox.WarnXminHorizonHeld, object)[0].Message
	t.Log(msg)
	for _, want := range []string{app, "idle in transaction", fmt.Sprintf("SELECT pg_terminate_backend(%d);", pid), "dead rows", "transactions old"} {
		require.Contains(t, msg, want)
	}

	// A negative bound looks for no holder, while it is still held.
	off, err := pgoutbox.New(t.Context(), p, pgoutbox.Options{Schema: b.Options().Schema, XminHorizonWarning: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = off.Close() })
	h, err = off.Health(t.Context())
	require.NoError(t, err)
	require.Empty(t, warnings(h, pgoutbox.WarnXminHorizonHeld, "*"))

	release()
	h, err = b.Health(t.Context())
	require.NoError(t, err)
	require.Empty(t, warnings(h, pgoutbox.WarnXminHorizonHeld, object), "the transaction ended")
}

func TestHealthDefaultBound(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{})
	require.Equal(t, pgoutbox.DefaultXminHorizonWarning, b.Options().XminHorizonWarning)
	pid, _ := holdSnapshot(t, p, randomName("pghealth-test-"))
	h, err := b.Health(t.Context())
	require.NoError(t, err)
	require.Empty(t, warnings(h, pgoutbox.WarnXminHorizonHeld, fmt.Sprintf("pid %d", pid)), "a snapshot taken just now is within 5 minutes")
}

func TestHealthAfterClose(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{})
	require.NoError(t, b.Close())
	_, err := b.Health(t.Context())
	require.ErrorIs(t, err, outbox.ErrClosed)
}

// privateCluster starts a PostgreSQL of its own with scripts/pg-private.sh
// (autovacuum on, the server's default, plus conf) and returns its URL; it
// is stopped and removed when t ends. Without initdb the test is skipped
// (failed under OUTBOX_REQUIRE_SERVICES=1).
func privateCluster(t *testing.T, conf string) string {
	t.Helper()
	script, err := filepath.Abs("../../scripts/pg-private.sh")
	require.NoError(t, err)
	// Not t.TempDir: its parent is 0700, and the server runs as the
	// postgres user when the test runs as root.
	dir, err := os.MkdirTemp("/tmp", "outbox-pghealth-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	dir = filepath.Join(dir, "cluster")
	run := func(ctx context.Context, cmd string) (string, error) {
		c := exec.CommandContext(ctx, script, cmd)
		c.Env = append(os.Environ(), "OUTBOX_PG_PRIVATE_DIR="+dir, "OUTBOX_PG_PRIVATE_CONF="+conf)
		out, err := c.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if out, err := run(ctx, "remove"); err != nil {
			t.Errorf("pg-private.sh remove: %v: %s", err, out)
		}
		_ = os.Remove(filepath.Dir(dir))
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := run(ctx, "start")
	if err != nil {
		if strings.Contains(out, "initdb not found") || strings.Contains(out, "psql is not installed") {
			testenv.Unavailable(t, "a private PostgreSQL cluster (initdb)", "OUTBOX_PG_BINDIR", errors.New(out))
		}
		t.Fatalf("pg-private.sh start: %v: %s", err, out)
	}
	lines := strings.Split(out, "\n")
	return lines[len(lines)-1]
}

// TestHealthPrivateCluster runs on a server of its own, with autovacuum
// on and prepared transactions enabled: no autovacuum-off warning; an old
// prepared transaction is reported; and a role that cannot read other
// roles' xact_start still reports their snapshots, timed from when it
// first saw them, and logs at DEBUG that it could not see.
func TestHealthPrivateCluster(t *testing.T) {
	t.Parallel()
	url := privateCluster(t, "max_prepared_transactions = 5")
	ctx := t.Context()
	p, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	opts := pgoutbox.Options{Schema: "pghealth", Partitions: 2, XminHorizonWarning: time.Millisecond}
	require.NoError(t, pgoutbox.Migrate(ctx, p, opts))
	b, err := pgoutbox.New(ctx, p, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })

	t.Run("NoAutovacuumOffWarning", func(t *testing.T) {
		var autovacuum string
		require.NoError(t, p.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum))
		require.Equal(t, "on", autovacuum)
		h, err := b.Health(ctx)
		require.NoError(t, err)
		require.Empty(t, warnings(h, pgoutbox.WarnAutovacuumOff, "*"))
		require.Empty(t, warnings(h, pgoutbox.WarnTableAutovacuumDisabled, "*"))
	})

	t.Run("PreparedTransaction", func(t *testing.T) {
		gid := randomName("pghealth-gid-")
		tx, err := p.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "INSERT INTO pghealth.outbox_hold (reason) VALUES ('prepared')")
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx)) // nothing left to commit: PREPARE ended it
		t.Cleanup(func() { _, _ = p.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'") })
		object := "prepared transaction " + gid
		h := waitHealth(t, b, "the prepared transaction to be reported", func(h outbox.Health) bool {
			return len(warnings(h, pgoutbox.WarnXminHorizonHeld, object)) == 1
		})
		require.Contains(t, warnings(h, pgoutbox.WarnXminHorizonHeld, object)[0].Message, "ROLLBACK PREPARED '"+gid+"';")
		_, err = p.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
		require.NoError(t, err)
		h, err = b.Health(ctx)
		require.NoError(t, err)
		require.Empty(t, warnings(h, pgoutbox.WarnXminHorizonHeld, object))
	})

	t.Run("SessionOfAnotherRole", func(t *testing.T) {
		_, err := p.Exec(ctx, `CREATE ROLE pghealth_relay LOGIN;
GRANT USAGE ON SCHEMA pghealth TO pghealth_relay;
GRANT SELECT ON ALL TABLES IN SCHEMA pghealth TO pghealth_relay`)
		require.NoError(t, err)
		cfg, err := pgxpool.ParseConfig(url)
		require.NoError(t, err)
		cfg.ConnConfig.User = "pghealth_relay"
		rp, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(rp.Close)
		logs := &testenv.LogCapture{}
		rb, err := pgoutbox.New(ctx, rp, pgoutbox.Options{Schema: "pghealth", XminHorizonWarning: time.Millisecond, Logger: slog.New(logs)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = rb.Close() })

		pid, _ := holdSnapshot(t, p, "pghealth-superuser") // the superuser's session
		object := fmt.Sprintf("pid %d", pid)
		h := waitHealth(t, rb, "the hidden session to be reported", func(h outbox.Health) bool {
			return len(warnings(h, pgoutbox.WarnXminHorizonHeld, object)) == 1
		})
		msg := warnings(h, pgoutbox.WarnXminHorizonHeld, object)[0].Message
		require.Contains(t, msg, "pg_read_all_stats")
		require.Contains(t, msg, "as long as this relay has seen it")
		require.NotEmpty(t, logs.Attrs(slog.LevelDebug, func(m string) bool { return strings.Contains(m, "grant it pg_read_all_stats") }), logs.String())

		// Granted pg_read_all_stats, the role reads the start and logs nothing.
		_, err = p.Exec(ctx, "GRANT pg_read_all_stats TO pghealth_relay")
		require.NoError(t, err)
		logs2 := &testenv.LogCapture{}
		rb2, err := pgoutbox.New(ctx, rp, pgoutbox.Options{Schema: "pghealth", XminHorizonWarning: time.Millisecond, Logger: slog.New(logs2)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = rb2.Close() })
		h, err = rb2.Health(ctx)
		require.NoError(t, err)
		ws := warnings(h, pgoutbox.WarnXminHorizonHeld, object)
		require.Len(t, ws, 1, "the first call reads the transaction's start")
		require.NotContains(t, ws[0].Message, "as long as this relay has seen it")
		require.Empty(t, logs2.Attrs(slog.LevelDebug, func(string) bool { return true }), logs2.String())
	})
}

// BenchmarkHealth times Health on an outbox of 100,000 entries over 8
// partitions (loadSpread), half of them deleted (dead rows), with the
// archive and the default bound. Health reads only the catalogue and the
// statistics, so its time does not depend on the rows; the sessions of
// the server (pg_stat_activity) are what it walks.
func BenchmarkHealth(b *testing.B) {
	const rows, partitions = 100_000, 8
	be, p := newBackend(b, extended, pgoutbox.Options{Partitions: partitions, Archive: true})
	ctx := context.Background()
	table := pgx.Identifier{be.Options().Schema, "outbox"}.Sanitize()
	if err := loadSpread(ctx, p, table, rows, partitions); err != nil {
		b.Fatal(err)
	}
	if _, err := p.Exec(ctx, "DELETE FROM "+table+" WHERE seq % 2 = 0"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		h, err := be.Health(ctx)
		if err != nil || len(h.Tables) != 2 || h.Tables[0].Bytes == 0 {
			b.Fatalf("Health: %+v, %v", h, err)
		}
	}
}
