package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The MySQL workloads (issue 30) run against OUTBOX_MYSQL_URL (default
// mysql://root@127.0.0.1:3306/, MariaDB 10.11 on our machines), in a
// database of their own, mysqlBenchDB, dropped at the start and at the end
// of the run. A server that cannot be reached has its rows left out with a
// message (the run fails under OUTBOX_REQUIRE_SERVICES=1, as the tests do).

// mysqlBenchDB is the database of every MySQL workload.
const mysqlBenchDB = "outbox_bench"

// mysqlPartitions is the partition count of the MySQL drains, ours and the
// raw loop's: 8, as the broker drains.
const mysqlPartitions = 8

// mysqlConn is the MySQL server of the MySQL workloads.
type mysqlConn struct {
	db      *sql.DB // 24 connections to mysqlBenchDB: 8 callers plus drainers
	dsn     string  // the DSN of db, for pools of their own (our relays)
	version string
}

// mysqlDSN turns a mysql://USER[:PASSWORD]@HOST[:PORT]/[DATABASE][?PARAMS]
// URL into a go-sql-driver/mysql DSN on database (the URL's own when
// database is empty), as internal/testenv does for the tests.
func mysqlDSN(raw, database string) (string, error) {
	u, err := neturl.Parse(raw)
	if err != nil || u.Scheme != "mysql" {
		return "", fmt.Errorf("OUTBOX_MYSQL_URL %s is not a mysql://user:password@host:3306/ URL", redact(raw))
	}
	cfg := mysql.NewConfig()
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(host, port)
	cfg.DBName = database
	if database == "" {
		cfg.DBName = strings.TrimPrefix(u.Path, "/")
	}
	dsn := cfg.FormatDSN()
	if u.RawQuery != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + u.RawQuery
	}
	return dsn, nil
}

// mysql returns the MySQL server, connecting in the first call (which
// recreates mysqlBenchDB); nil when it cannot be reached and the run does
// not require it (said once).
func (s *Suite) mysql(ctx context.Context) (*mysqlConn, error) {
	if c, ok := s.keep["mysql"].(*mysqlConn); ok {
		return c, nil
	}
	if _, ok := s.keep["mysql.unreachable"]; ok {
		return nil, nil
	}
	raw := envOr("OUTBOX_MYSQL_URL", "mysql://root@127.0.0.1:3306/")
	c, err := dialMySQL(ctx, raw)
	if err != nil {
		msg := fmt.Sprintf("MySQL at %s is not reachable (%v); start it or set OUTBOX_MYSQL_URL", redact(raw), err)
		if os.Getenv("OUTBOX_REQUIRE_SERVICES") == "1" {
			return nil, errors.New(msg)
		}
		s.logf("%s: its rows are skipped", msg)
		s.keep["mysql.unreachable"] = true
		return nil, nil
	}
	s.keep["mysql"] = c
	if s.info.Peers == nil {
		s.info.Peers = map[string]string{}
	}
	s.info.Peers["MySQL server"] = c.version
	s.cleanups = append(s.cleanups, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := c.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+mysqlBenchDB); err != nil {
			s.logf("cleanup: dropping database %s: %v", mysqlBenchDB, err)
		}
		c.db.Close()
	})
	return c, nil
}

func dialMySQL(ctx context.Context, raw string) (*mysqlConn, error) {
	admin, err := mysqlDSN(raw, "")
	if err != nil {
		return nil, err
	}
	adb, err := sql.Open("mysql", admin)
	if err != nil {
		return nil, err
	}
	defer adb.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := adb.PingContext(pctx); err != nil {
		return nil, err
	}
	// What an interrupted run left behind goes first.
	if _, err := adb.ExecContext(ctx, "DROP DATABASE IF EXISTS "+mysqlBenchDB); err != nil {
		return nil, err
	}
	if _, err := adb.ExecContext(ctx, "CREATE DATABASE "+mysqlBenchDB+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return nil, err
	}
	dsn, err := mysqlDSN(raw, mysqlBenchDB)
	if err != nil {
		return nil, err
	}
	if dsn, err = withInterpolation(dsn, raw); err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(24)
	db.SetMaxIdleConns(24)
	c := &mysqlConn{db: db, dsn: dsn}
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&c.version); err != nil {
		db.Close()
		return nil, err
	}
	var pool int64
	if err := db.QueryRowContext(ctx, "SELECT @@innodb_buffer_pool_size").Scan(&pool); err == nil {
		c.version += fmt.Sprintf(" (innodb_buffer_pool_size %d MiB)", pool>>20)
	}
	return c, nil
}

// withInterpolation turns the driver's interpolateParams on in dsn unless
// the URL raw sets it: a statement with arguments that is not a prepared
// statement is then one round trip (the driver quotes the arguments into
// the text) instead of three (prepare, execute, close). The raw limits'
// statements and Watermill's are such statements; ours are prepared once
// per backend, which interpolateParams does not change.
func withInterpolation(dsn, raw string) (string, error) {
	if strings.Contains(raw, "interpolateParams") {
		return dsn, nil
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	cfg.InterpolateParams = true
	return cfg.FormatDSN(), nil
}

// mysqlSettle waits (at most 30 s) until InnoDB's purge has caught up
// with what earlier workloads deleted (a history list under 1,000
// transactions): a drain deletes 100,000 rows, whose purge would otherwise
// take CPU and I/O from the next workload's timed part.
func (s *Suite) mysqlSettle(ctx context.Context, c *mysqlConn) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var name, v string
		if err := c.db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'").Scan(&name, &v); err != nil {
			return // MySQL 8.0 has no such status variable
		}
		if n, _ := strconv.Atoi(v); n < 1000 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// analyze runs ANALYZE TABLE on tables. Every MySQL backlog (ours, the
// raw one, Watermill's) is analyzed after it is filled and before its
// drain is timed, as the Postgres ones are: InnoDB recalculates a table's
// statistics in the background only after 10% of its rows changed, and a
// plan made from the statistics of the empty table can differ (ours: the
// per-key hold-back subquery on the due index instead of its own, a scan
// of the partition per candidate row; see analysis.md, "MySQL").
func (c *mysqlConn) analyze(ctx context.Context, db *sql.DB, tables ...string) error {
	rows, err := db.QueryContext(ctx, "ANALYZE TABLE "+strings.Join(tables, ", "))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() { // Table, Op, Msg_type, Msg_text
	}
	return rows.Err()
}

// mysqlRows counts the rows of table.
func (c *mysqlConn) rows(ctx context.Context, table string) (int, error) {
	var n int
	err := c.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n)
	return n, err
}

// expectRows checks that table holds want rows.
func (c *mysqlConn) expectRows(ctx context.Context, table string, want int) error {
	got, err := c.rows(ctx, table)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("count wrong: %d rows in %s, want %d", got, table, want)
	}
	return nil
}

// mysqlSubs are the MySQL workloads as -only and -skip see them: "mysql
// raw", "mysql W4 raw", ... ("-only mysql" runs them all).
var mysqlSubs = []string{"raw", "W4 raw", "watermill", "W1+W2 append and drain", "W4 backlog", "W3 latency"}

// mysqlSubSelected reports whether the MySQL workload sub runs: -only
// matches "mysql sub" or "mysql", and -skip matches neither.
func (s *Suite) mysqlSubSelected(sub string) bool {
	full := "mysql " + sub
	if s.skipped(full) || s.skipped("mysql") {
		return false
	}
	return s.cfg.Only == nil || s.cfg.Only.MatchString(full) || s.cfg.Only.MatchString("mysql")
}

func (s *Suite) mysqlSelected() bool {
	for _, sub := range mysqlSubs {
		if s.mysqlSubSelected(sub) {
			return true
		}
	}
	return false
}

// mysqlWorkload runs one round of the MySQL workloads. The raw limits
// and Watermill run first, so our figures' ratios against them share the
// round's load.
func (s *Suite) mysqlWorkload(ctx context.Context) error {
	c, err := s.mysql(ctx)
	if err != nil || c == nil {
		return err
	}
	var errs []error
	step := func(sub string, fn func() error) {
		if ctx.Err() != nil || !s.mysqlSubSelected(sub) {
			return
		}
		s.mysqlSettle(ctx, c)
		t0 := time.Now()
		if err := fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sub, err))
			s.fail("mysql %s: %v", sub, err)
		}
		s.logf("   mysql %s took %s", sub, time.Since(t0).Round(100*time.Millisecond))
	}
	step("raw", func() error { return s.rawMySQL(ctx, c) })
	step("W4 raw", func() error { return s.rawMySQLBacklog(ctx, c) })
	step("watermill", func() error { return s.watermillMySQL(ctx, c) })
	for _, w := range s.mysqlOurs(c) {
		step(w.name, func() error { return w.fn(ctx) })
	}
	return errors.Join(errs...)
}

// mysqlComparisons are the MySQL rows of the targets table (issue 30):
// appends ≥ 0.8× the raw INSERTs, the drain ≥ 0.7× the raw claim loop and
// ≥ 5× Watermill SQL's MySQL subscriber, the big backlog's drain against
// the small one's, and the latency and the idle cost of each poll
// interval.
func mysqlComparisons() []comparison {
	cs := []comparison{
		{group: "MySQL append, 1 entry/tx, 8 callers", ours: "ours.my.append1", other: "raw.my.insert1tx", target: 0.8},
		{group: "MySQL append, 1 entry/tx, 8 callers", ours: "ours.my.append1", other: "wm.my.append.default"},
		{group: "MySQL append, 100 entries/tx, 8 callers", ours: "ours.my.append100", other: "raw.my.insert100", target: 0.8},
		{group: "MySQL drain, 100k backlog, no-op sink", ours: "ours.my.drain.noop", other: "raw.my.claim8", target: 0.7},
		{group: "MySQL drain, 100k backlog, no-op sink", ours: "ours.my.drain.noop", other: "raw.my.claim1", target: 0.7},
		{group: "MySQL drain, 100k backlog, no-op sink", ours: "ours.my.drain.noop", other: "wm.my.sub.default", target: 5},
		{group: "MySQL drain, 100k backlog, no-op sink", ours: "ours.my.drain.noop", other: "wm.my.sub.queue", target: 5},
		{group: "MySQL drain, big backlog vs small", ours: "ours.my.backlog.big.rate", other: "ours.my.backlog.small.rate", target: 0.9},
		{group: "MySQL raw claim loop, big backlog vs small", ours: "raw.my.backlog.big.rate", other: "raw.my.backlog.small.rate"},
	}
	for _, iv := range pollIntervals() {
		cs = append(cs,
			comparison{group: fmt.Sprintf("MySQL commit-to-sink p99, PollInterval %s, polling only (%d appends/s)", ivName(iv), latRate), ours: "ours.my.lat.poll." + ivName(iv) + ".p99"},
			comparison{group: fmt.Sprintf("MySQL commit-to-sink p99, PollInterval %s, in-process wake-ups (%d appends/s)", ivName(iv), latRate), ours: "ours.my.lat.wake." + ivName(iv) + ".p99"},
			comparison{group: fmt.Sprintf("MySQL idle relay, PollInterval %s: server queries/s per partition", ivName(iv)), ours: idleKey(iv)},
			comparison{group: fmt.Sprintf("MySQL idle relay, PollInterval %s: server CPU per partition", ivName(iv)), ours: idleKey(iv) + ".cpu"},
		)
	}
	return cs
}
