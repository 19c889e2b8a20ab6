package main

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/internal/testenv"
)

func TestMySQLDSN(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, db, want string }{
		{"mysql://root@127.0.0.1:3306/", "", "root@tcp(127.0.0.1:3306)/"},
		{"mysql://root@127.0.0.1:3306/", "b", "root@tcp(127.0.0.1:3306)/b"},
		{"mysql://app:s3cret@db.internal/app?tls=true", "", "app:s3cret@tcp(db.internal:3306)/app?tls=true"},
		{"mysql://app:s3cret@db.internal/app?tls=true", "other", "app:s3cret@tcp(db.internal:3306)/other?tls=true"},
		{"mysql://[::1]:3307/x", "", "tcp([::1]:3307)/x"},
	} {
		got, err := mysqlDSN(c.url, c.db)
		if err != nil || got != c.want {
			t.Errorf("mysqlDSN(%q, %q) = %q, %v; want %q", c.url, c.db, got, err, c.want)
		}
	}
	_, err := mysqlDSN("postgres://u:pw-secret@h/", "")
	if err == nil || strings.Contains(err.Error(), "pw-secret") {
		t.Errorf("a postgres:// URL: error %v, want one without the password", err)
	}
}

func TestMySQLWorkloadSelection(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		only, skip string
		want       []string
	}{
		{"", "", mysqlSubs},
		{"mysql", "", mysqlSubs},
		{"mysql (raw|W4 raw|watermill)$", "", []string{"raw", "W4 raw", "watermill"}},
		{"mysql W4", "", []string{"W4 raw", "W4 backlog"}},
		{"", "mysql W3|mysql W4", []string{"raw", "watermill", "W1+W2 append and drain"}},
		{"postgres", "", nil},
		{"", "mysql", nil},
	} {
		s := &Suite{}
		if c.only != "" {
			s.cfg.Only = regexp.MustCompile(c.only)
		}
		if c.skip != "" {
			s.cfg.Skip = regexp.MustCompile(c.skip)
		}
		var got []string
		for _, sub := range mysqlSubs {
			if s.mysqlSubSelected(sub) {
				got = append(got, sub)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("-only %q -skip %q: run %q, want %q", c.only, c.skip, got, c.want)
		}
		if s.selectedWorkload(workload{name: "mysql"}) != (len(got) > 0) {
			t.Errorf("-only %q -skip %q: workload mysql selected = %v, its parts %q", c.only, c.skip, s.selectedWorkload(workload{name: "mysql"}), got)
		}
	}
}

func TestUnreachableMySQLIsSkippedOrFailsWithoutItsPassword(t *testing.T) {
	// Not parallel: it sets environment variables.
	t.Setenv("OUTBOX_MYSQL_URL", "mysql://bench:s3cret-pw@127.0.0.1:1/")
	t.Setenv("OUTBOX_REQUIRE_SERVICES", "")
	s := &Suite{keep: map[string]any{}}
	if err := s.mysqlWorkload(context.Background()); err != nil {
		t.Fatalf("an unreachable MySQL failed the run without OUTBOX_REQUIRE_SERVICES: %v", err)
	}
	if _, ok := s.keep["mysql.unreachable"]; !ok {
		t.Fatal("the unreachable MySQL is not remembered as skipped")
	}
	if err := s.mysqlWorkload(context.Background()); err != nil {
		t.Fatalf("second round: %v", err)
	}

	t.Setenv("OUTBOX_REQUIRE_SERVICES", "1")
	s = &Suite{keep: map[string]any{}}
	err := s.mysqlWorkload(context.Background())
	if err == nil {
		t.Fatal("an unreachable MySQL did not fail the run under OUTBOX_REQUIRE_SERVICES=1")
	}
	for _, want := range []string{"OUTBOX_MYSQL_URL", "127.0.0.1:1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("error %q shows the password", err)
	}
}

// The raw claim loop takes every row exactly once, with one client per
// partition and with one client for all, and leaves the table empty.
func TestRawMySQLClaimLoopDrainsEveryRow(t *testing.T) {
	// Not parallel: it uses the harness's database, which dialMySQL
	// recreates.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := dialMySQL(ctx, testenv.MySQLURL())
	if err != nil {
		testenv.Unavailable(t, "MySQL", "OUTBOX_MYSQL_URL", err)
	}
	t.Cleanup(func() {
		_, _ = c.db.Exec("DROP DATABASE IF EXISTS " + mysqlBenchDB)
		c.db.Close()
	})
	const n = 3000
	msgs := newMessages(n, 1)
	for _, clients := range []int{mysqlPartitions, 1} {
		if err := c.resetRaw(ctx, rawMySQLTable); err != nil {
			t.Fatal(err)
		}
		if _, err := c.fillRaw(ctx, rawMySQLTable, msgs, mysqlPartitions); err != nil {
			t.Fatal(err)
		}
		tr := newTracker(n)
		if _, err := c.rawDrain(ctx, rawMySQLTable, clients, n, tr); err != nil {
			t.Fatalf("%d clients: %v", clients, err)
		}
		if err := tr.counts_().check(true); err != nil {
			t.Errorf("%d clients: %v", clients, err)
		}
		if err := c.expectRows(ctx, rawMySQLTable, 0); err != nil {
			t.Errorf("%d clients: %v", clients, err)
		}
	}
}

// The private mariadbd of the idle-cost measurement starts, answers,
// counts the statements sent to it, and leaves nothing behind.
func TestPrivateMariaDBCountsQuestions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := startPrivateMariaDB(ctx)
	if err != nil {
		t.Fatalf("starting a private mariadbd: %v", err)
	}
	questions := func() int64 {
		var name string
		var v int64
		if err := p.db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	q0 := questions()
	for range 10 {
		if _, err := p.db.ExecContext(ctx, "DO 1"); err != nil {
			t.Fatal(err)
		}
	}
	if d := questions() - q0; d != 11 {
		t.Errorf("10 statements and a SHOW STATUS: Questions went up by %d, want 11", d)
	}
	dir := p.dir
	p.stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the private server's directory %s is left behind (%v)", dir, err)
	}
}
