package pgoutbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// withPrefix matches a message that starts with prefix.
func withPrefix(prefix string) func(string) bool {
	return func(m string) bool { return strings.HasPrefix(m, prefix) }
}

// TestListenerSummarisesAnOutage cuts the listener's connection and keeps
// it from reconnecting for a while (its role may not log in), then lets it
// back: one WARN when the connection is lost, at most one WARN per
// interval with the failed reconnects while it is down, one INFO when it
// is back; not one WARN per failed reconnect.
func TestListenerSummarisesAnOutage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	defer admin.Close(context.Background())
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	role := "pgoutbox_listen_" + hex.EncodeToString(suffix[:])
	exec := func(sql string) {
		t.Helper()
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("CREATE ROLE " + role + " LOGIN")
	cfg := admin.Config().Copy()
	cfg.User, cfg.Password = role, ""
	cfg.RuntimeParams["application_name"] = role

	const every = 300 * time.Millisecond
	logs := &testenv.LogCapture{}
	lctx, stop := context.WithCancel(ctx)
	l := newListener(lctx, cfg, Options{Channel: role, Partitions: 2, Logger: slog.New(logs)}, every)
	defer func() {
		stop()
		l.wait()
		if _, err := admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Errorf("dropping the test's role: %v", err)
		}
	}()
	ch := l.subscribe(lctx)
	<-l.ready

	// Down: the role may not log in any more, and its connection is cut.
	began := time.Now()
	exec("ALTER ROLE " + role + " NOLOGIN")
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", role).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminating the listener's connection: %d, %v", n, err)
	}
	// Long enough for several failed reconnects (their backoff doubles
	// from 50 ms) and several intervals.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if len(logs.Attrs(slog.LevelWarn, withPrefix("pgoutbox: LISTEN connection still down"))) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two summaries of failed reconnects within 30 s:\n%s", logs)
		}
	}
	exec("ALTER ROLE " + role + " LOGIN")
	for woken := false; !woken; {
		select {
		case p := <-ch:
			woken = p == outbox.AllPartitions
		case <-ctx.Done():
			t.Fatalf("the listener did not reconnect:\n%s", logs)
		}
	}
	downFor := time.Since(began)

	lost := logs.Attrs(slog.LevelWarn, withPrefix("pgoutbox: LISTEN connection lost"))
	still := logs.Attrs(slog.LevelWarn, withPrefix("pgoutbox: LISTEN connection still down"))
	back := logs.Attrs(slog.LevelInfo, withPrefix("pgoutbox: LISTEN connection back"))
	if len(lost) != 1 || len(back) != 1 {
		t.Fatalf("%d WARNs that the connection was lost and %d INFOs that it is back, want 1 and 1:\n%s", len(lost), len(back), logs)
	}
	if len(still) > int(downFor/every) {
		t.Errorf("%d summaries in %v, more than one per %v:\n%s", len(still), downFor, every, logs)
	}
	summarised := 0
	for _, a := range still {
		var c int
		if _, err := fmt.Sscan(a["failed_reconnects"], &c); err != nil || c < 1 || !strings.Contains(a["error"], "not permitted to log in") {
			t.Errorf("a summary has failed_reconnects=%q error=%q", a["failed_reconnects"], a["error"])
		}
		summarised += c
	}
	var total int
	if _, err := fmt.Sscan(back[0]["failed_reconnects"], &total); err != nil || total < summarised || total < 2 {
		t.Errorf("the INFO counts failed_reconnects=%q, want at least %d (the summaries') and 2", back[0]["failed_reconnects"], summarised)
	}
	if d, err := time.ParseDuration(back[0]["down_for"]); err != nil || d <= 0 || d > downFor {
		t.Errorf("the INFO says down_for=%q; the test saw %v", back[0]["down_for"], downFor)
	}
}
