package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver of the harness's own sessions

	"github.com/outboxrelay/outbox/chaos/internal/servers"
	"github.com/outboxrelay/outbox/internal/mysqlurl"
)

// The MySQL scenarios: the outbox in MariaDB (or MySQL) through the real
// `outbox relay --store mysql://...`, the appenders appending with
// mysqloutbox's AppendInTx in *sql.Tx transactions.

const (
	// mysqlDatabase is the outbox's database on a private server.
	mysqlDatabase = "outbox"
	// mysqlRelayUser and mysqlAppUser are the accounts the relays and the
	// appenders log in with on a private server, so that their sessions
	// can be told apart in information_schema.processlist (MySQL has no
	// application_name).
	mysqlRelayUser = "relay"
	mysqlAppUser   = "app"
)

// mysqlConnKill: KILL CONNECTION of the relays' sessions (and, every
// other time, of the appenders'). Most sessions of a pool are idle at any
// moment, and database/sql replaces a killed idle one without a word, so
// for a second the harness kills every relay session it catches in a
// statement or a transaction, and then the idle ones.
func mysqlConnKill() *scenario {
	return &scenario{
		name: "mysql/conn-kill", backend: backendPrivateMariaDB, relays: 3,
		title: "KILL CONNECTION of the relays' sessions caught in a statement or transaction for 1 s, then of their idle ones (and of every appender session, every other time), every 3-4 s",
		every: 2 * time.Second, jitter: time.Second,
		full: 100 * time.Second, short: 10 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			admin := r.my.DSN("")
			relays := servers.Sessions{User: mysqlRelayUser, Database: mysqlDatabase, Busy: true}
			busy, err := servers.KillConnections(ctx, admin, relays, time.Second)
			if err != nil {
				return err
			}
			relays.Busy = false
			idle, err := servers.KillConnections(ctx, admin, relays, 0)
			if err != nil {
				return err
			}
			if i%2 == 0 {
				r.fault("KILL CONNECTION", "relay sessions: %d in a statement or transaction, then %d idle", busy, idle)
				return nil
			}
			apps, err := servers.KillConnections(ctx, admin, servers.Sessions{User: mysqlAppUser, Database: mysqlDatabase}, 0)
			if err != nil {
				return err
			}
			r.fault("KILL CONNECTION", "relay sessions: %d in a statement or transaction, then %d idle; %d appender sessions", busy, idle, apps)
			return nil
		},
		notes: "A private MariaDB; the relays log in as `relay`, the appenders as `app`, and the harness ends their sessions found in information_schema.processlist by user and database: for a second every relay session it catches running a statement or holding an InnoDB transaction (polled every 5 ms, information_schema.innodb_trx every 150 ms), then every idle one. Relays lose their connections mid-statement and mid-transaction (a fetch, a mark, a lease acquisition or renewal); the killed transactions roll back, and database/sql opens new connections. Appenders lose theirs mid-transaction and sometimes during COMMIT, when the outcome is unknown to them: they record the entry as unknown and retry it with the same ID, which the backend skips if the first commit went through.",
	}
}

// mysqlServerRestart: the private mariadbd SIGKILLed and started again.
func mysqlServerRestart() *scenario {
	return &scenario{
		name: "mysql/server-restart", backend: backendPrivateMariaDB, relays: 3,
		title: "mariadbd SIGKILLed and restarted 1 s later, every 6-8 s",
		every: 6 * time.Second, jitter: 2 * time.Second,
		full: 150 * time.Second, short: 14 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			r.fault("mariadbd SIGKILLed", "restarted 1s later")
			if err := r.my.Kill(); err != nil {
				return err
			}
			if err := sleep(ctx, time.Second); err != nil {
				return err
			}
			start := time.Now()
			if err := r.my.Restart(ctx); err != nil {
				return err
			}
			r.logf("mariadbd accepting connections %v after start (PID %d)", time.Since(start).Round(time.Millisecond), r.my.PID())
			return nil
		},
		notes: "A private MariaDB (mariadb-install-db, its own port and data directory, binary log off, innodb_flush_log_at_trx_commit=1: a commit is in the redo log before it returns). Every session dies; the server is down about a second and InnoDB recovers from its redo log at start, rolling back the transactions that were open. Commits that returned are durable; a COMMIT in flight when the server died has an unknown outcome for the appender. Leases survive in their table, so partitions come back to their holders as soon as the relays reconnect.",
	}
}

// setupMySQL makes the scenario's outbox database: on the shared server
// (OUTBOX_MYSQL_URL) a database of the run's own, dropped at the end, all
// sessions as the URL's user; on a private server (started in sdir) the
// database outbox, with the relays and the appenders logging in as
// accounts of their own. It leaves r.storeURL (the admin URL of the
// database: migrate, status) and the relays' and appenders' URLs set.
func (r *run) setupMySQL(ctx context.Context, sdir string) error {
	r.kind = "mysql"
	if r.sc.backend == backendMySQL {
		return r.setupSharedMySQL(ctx)
	}
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return err
	}
	m, err := servers.StartMariaDB(ctx, sdir)
	if err != nil {
		return notInstalled(err)
	}
	r.my = m
	r.cleanup = append(r.cleanup, func() { _ = m.Close() })
	stmts := []string{"CREATE DATABASE " + mysqlDatabase}
	for _, u := range []string{mysqlRelayUser, mysqlAppUser} {
		stmts = append(stmts,
			fmt.Sprintf("CREATE USER '%s'@'127.0.0.1'", u),
			fmt.Sprintf("GRANT ALL ON %s.* TO '%s'@'127.0.0.1'", mysqlDatabase, u))
	}
	if err := mysqlExec(ctx, m.DSN(""), stmts...); err != nil {
		return err
	}
	if r.storeURL, err = mysqlurl.WithDatabase(m.URL(), mysqlDatabase, ""); err != nil {
		return err
	}
	if r.myRelayURL, err = mysqlurl.WithDatabase(m.URL(), mysqlDatabase, mysqlRelayUser); err != nil {
		return err
	}
	r.myAppURL, err = mysqlurl.WithDatabase(m.URL(), mysqlDatabase, mysqlAppUser)
	return err
}

func (r *run) setupSharedMySQL(ctx context.Context) error {
	admin, err := mysqlurl.DSN(r.h.mysqlURL)
	if err != nil {
		return fmt.Errorf("OUTBOX_MYSQL_URL: %w", err)
	}
	if err := pingMySQL(ctx, admin); err != nil {
		return &missingError{fmt.Sprintf("no MySQL at OUTBOX_MYSQL_URL (%v); start one (./scripts/services.sh start) or set the variable", err)}
	}
	database := "chaos_" + strings.ReplaceAll(r.id, "-", "_")
	if err := mysqlExec(ctx, admin, "CREATE DATABASE `"+database+"`"); err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = mysqlExec(ctx, admin, "DROP DATABASE IF EXISTS `"+database+"`")
	})
	if r.storeURL, err = mysqlurl.WithDatabase(r.h.mysqlURL, database, ""); err != nil {
		return err
	}
	r.myRelayURL, r.myAppURL = r.storeURL, r.storeURL
	return nil
}

// mysqlSessionURL is the store URL a relay or an appender of this run
// logs in with: name is what withAppName got, "chaos-ID-relay-N" or
// "chaos-ID-appN".
func (r *run) mysqlSessionURL(name string) string {
	if strings.HasPrefix(strings.TrimPrefix(name, r.appName()), "relay-") {
		return r.myRelayURL
	}
	return r.myAppURL
}

func pingMySQL(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// mysqlExec runs the statements in order on one session of dsn.
func mysqlExec(ctx context.Context, dsn string, stmts ...string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	defer conn.Close()
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("mysql: %s: %w", s, err)
		}
	}
	return nil
}
