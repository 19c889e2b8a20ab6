package servers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox/chaos/internal/proc"
)

func openMariaDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestMariaDBKillRestart(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	d := dir(t)
	m, err := StartMariaDB(ctx, d)
	started(t, err)
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	if want := fmt.Sprintf("mysql://root@127.0.0.1:%d/", m.Port()); m.URL() != want {
		t.Fatalf("URL %s, want %s", m.URL(), want)
	}
	db := openMariaDB(t, m.DSN(""))
	var data string
	if err := db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&data); err != nil {
		t.Fatal(err)
	}
	if filepath.Clean(data) != filepath.Join(d, "data") {
		t.Fatalf("the server's data directory is %s, want %s", data, filepath.Join(d, "data"))
	}
	fillTable(t, ctx, db, 100)
	// A transaction left open at the kill: its row must not survive.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO k.t VALUES (1000)"); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(ctx); err == nil {
		t.Fatal("Restart of a running server: no error")
	}
	port, pid := m.Port(), m.PID()
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("ping answered after Kill")
	}
	if err := m.Kill(); !errors.Is(err, proc.ErrExited) {
		t.Fatalf("second Kill: %v, want an error wrapping proc.ErrExited", err)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("a transaction of the killed server committed")
	}
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if m.Port() != port || m.PID() == pid {
		t.Fatalf("after Restart: port %d (was %d), PID %d (was %d); want the same port, a new process", m.Port(), port, m.PID(), pid)
	}
	var n, maxID int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), MAX(id) FROM k.t").Scan(&n, &maxID); err != nil {
		t.Fatal(err)
	}
	if n != 100 || maxID != 99 {
		t.Fatalf("after the kill: %d rows, max id %d; want the 100 committed rows, max id 99", n, maxID)
	}
	checkClose(t, ctx, m, db)
}

// fillTable creates the table k.t and commits rows 0..n-1 into it, one
// transaction each.
func fillTable(t *testing.T, ctx context.Context, db *sql.DB, n int) {
	t.Helper()
	for _, q := range []string{"CREATE DATABASE k", "CREATE TABLE k.t (id INT PRIMARY KEY) ENGINE=InnoDB"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if _, err := db.ExecContext(ctx, "INSERT INTO k.t VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
	}
}

// checkClose closes m and checks that the server is gone, that a second
// Close is a no-op and that Restart is refused.
func checkClose(t *testing.T, ctx context.Context, m *MariaDB, db *sql.DB) {
	t.Helper()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("ping answered after Close")
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := m.Restart(ctx); err == nil {
		t.Fatal("Restart after Close: no error")
	}
}

func TestMariaDBKillConnections(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	m, err := StartMariaDB(ctx, dir(t))
	started(t, err)
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	admin := openMariaDB(t, m.DSN(""))
	for _, q := range []string{
		"CREATE DATABASE a", "CREATE DATABASE b",
		"CREATE USER relay@'127.0.0.1'", "GRANT ALL ON *.* TO relay@'127.0.0.1'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// One session each: the victim (relay on a), and bystanders (relay on
	// b, root on a).
	session := func(dsn string) *sql.Conn {
		t.Helper()
		return mariaDBSession(t, ctx, dsn)
	}
	port := fmt.Sprint(m.Port())
	victim := session("relay@tcp(127.0.0.1:" + port + ")/a")
	otherDB := session("relay@tcp(127.0.0.1:" + port + ")/b")
	otherUser := session(m.DSN("a"))
	n, err := KillConnections(ctx, m.DSN(""), Sessions{User: "relay", Database: "a"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("killed %d sessions, want 1", n)
	}
	if err := victim.PingContext(ctx); err == nil {
		t.Fatal("relay's session on a still works after KillConnections")
	}
	if err := otherDB.PingContext(ctx); err != nil {
		t.Fatalf("relay's session on b was hit: %v", err)
	}
	if err := otherUser.PingContext(ctx); err != nil {
		t.Fatalf("root's session on a was hit: %v", err)
	}
	for _, c := range [][2]string{{"", "a"}, {"relay", ""}} {
		if _, err := KillConnections(ctx, m.DSN(""), Sessions{User: c[0], Database: c[1]}, 0); err == nil {
			t.Fatalf("KillConnections(%q, %q): no error", c[0], c[1])
		}
	}
}

// mariaDBSession is one session of dsn, closed when t ends.
func mariaDBSession(t *testing.T, ctx context.Context, dsn string) *sql.Conn {
	t.Helper()
	c, err := openMariaDB(t, dsn).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestMariaDBKillBusyConnections: with Busy, KillConnections ends the
// sessions in a statement or a transaction, also one that starts its
// transaction after the call began, and leaves the idle ones alone.
func TestMariaDBKillBusyConnections(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	m, err := StartMariaDB(ctx, dir(t))
	started(t, err)
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	admin := openMariaDB(t, m.DSN(""))
	for _, q := range []string{"CREATE DATABASE a", "CREATE TABLE a.t (id INT PRIMARY KEY) ENGINE=InnoDB"} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	idle := mariaDBSession(t, ctx, m.DSN("a"))
	inTx := mariaDBSession(t, ctx, m.DSN("a"))
	if _, err := inTx.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := inTx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	sleeping := mariaDBSession(t, ctx, m.DSN("a"))
	slept := make(chan error, 1)
	go func() {
		_, err := sleeping.ExecContext(ctx, "DO SLEEP(30)")
		slept <- err
	}()
	late := mariaDBSession(t, ctx, m.DSN("a"))
	lateErr := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		if _, err := late.ExecContext(ctx, "BEGIN"); err != nil {
			lateErr <- err
			return
		}
		_, err := late.ExecContext(ctx, "INSERT INTO t VALUES (2)")
		lateErr <- err
	}()
	time.Sleep(100 * time.Millisecond) // DO SLEEP is running
	n, err := KillConnections(ctx, m.DSN(""), Sessions{User: "root", Database: "a", Busy: true}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Killed after its INSERT, or during it: either way its session ends.
	<-lateErr
	if n != 3 {
		t.Errorf("killed %d sessions, want 3 (in a transaction, in a statement, in a transaction begun later)", n)
	}
	if err := <-slept; err == nil {
		t.Error("DO SLEEP(30) returned without an error: its session was not killed")
	}
	for name, c := range map[string]*sql.Conn{"in a transaction": inTx, "begun later": late} {
		if err := c.PingContext(ctx); err == nil {
			t.Errorf("the session %s still works", name)
		}
	}
	if err := idle.PingContext(ctx); err != nil {
		t.Errorf("the idle session was hit: %v", err)
	}
	var rows int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM a.t").Scan(&rows); err != nil || rows != 0 {
		t.Errorf("%d rows (%v) after the killed transactions, want 0", rows, err)
	}
}
