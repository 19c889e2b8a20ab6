package mysqloutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
)

var _ outbox.HealthChecker = (*Backend)(nil)

// healthTables reads the figures of the outbox table and its archive.
// DATA_LENGTH + INDEX_LENGTH are the pages the rows and indexes use;
// DATA_FREE, the space the tablespace holds and InnoDB reuses (a file per
// table never shrinks by itself), is left out.
const healthTables = `SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(DATA_LENGTH, 0), COALESCE(INDEX_LENGTH, 0),
       COALESCE(TABLE_ROWS, -1)
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?)
ORDER BY TABLE_NAME`

// healthHistory reads InnoDB's history list length (needs PROCESS).
const healthHistory = `SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'`

// healthHistoryStatus is MariaDB's history list length without PROCESS.
const healthHistoryStatus = `SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'`

// healthLongTrx lists the oldest transactions open longer than ?
// microseconds (needs PROCESS to see other users' transactions), with
// their thread, age in microseconds, user, host and database. NOW(6) and
// trx_started are both in the session's time zone.
const healthLongTrx = `SELECT t.trx_mysql_thread_id, TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)),
       COALESCE(p.USER, ''), COALESCE(p.HOST, ''), COALESCE(p.DB, '')
FROM information_schema.INNODB_TRX AS t
LEFT JOIN information_schema.PROCESSLIST AS p ON p.ID = t.trx_mysql_thread_id
WHERE t.trx_started < NOW(6) - INTERVAL ? MICROSECOND
ORDER BY t.trx_started
LIMIT ?`

// maxLongTrx bounds the long transactions one Health call reports.
const maxLongTrx = 5

// Health implements [outbox.HealthChecker] from the server's catalogue,
// changing nothing (three reads; four without PROCESS):
//
//   - Tables: the outbox table and "<table>_archive", named
//     "database.table", from information_schema.TABLES: Bytes is
//     DATA_LENGTH + INDEX_LENGTH (the pages rows and indexes use; the
//     tablespace's free space, DATA_FREE, is not counted: InnoDB reuses
//     it, and a file per table never shrinks by itself), LiveRows is
//     TABLE_ROWS (InnoDB's estimate from its statistics), DeadRows and
//     Vacuums are -1 (InnoDB's purge removes deleted rows by itself; its
//     backlog is the history list length below) and LastVacuum is zero.
//     On MySQL 8 these figures are cached for information_schema_stats_expiry
//     (default 24 hours; MariaDB reads them live): set it to 0 for fresh
//     ones.
//   - Warning "purge-lag" (object: the server) when InnoDB's history list
//     length (information_schema.INNODB_METRICS trx_rseg_history_len, or
//     MariaDB's status Innodb_history_list_length) exceeds
//     Options.PurgeLag: the purge is behind, usually held back by a long
//     transaction.
//   - Warning "long-transaction" (object "thread N") for each of the five
//     oldest transactions open longer than Options.LongTransaction
//     (information_schema.INNODB_TRX), with its age, user, host and the
//     KILL that ends it.
//
// The transaction checks need the PROCESS privilege (GRANT PROCESS ON *.*
// TO user); without it Health still reports the tables and MariaDB's
// history length, and adds the warning "health-unchecked" saying which
// check is off and how to grant it. Safe for concurrent use; after Close
// it returns [outbox.ErrClosed].
func (b *Backend) Health(ctx context.Context) (outbox.Health, error) {
	const op = "Health"
	if err := b.checkOpen(op); err != nil {
		return outbox.Health{}, err
	}
	var h outbox.Health
	tables, err := b.healthTables(ctx)
	if err != nil {
		return outbox.Health{}, b.opsError(ctx, op, err)
	}
	h.Tables = tables
	var denied []string
	if b.opts.PurgeLag >= 0 {
		w, err := b.purgeLag(ctx)
		switch {
		case isMySQLError(err, errAccessDenied):
			denied = append(denied, "the purge-lag check")
		case err != nil:
			return outbox.Health{}, b.opsError(ctx, op, err)
		case w != nil:
			h.Warnings = append(h.Warnings, *w)
		}
	}
	if b.opts.LongTransaction >= 0 {
		ws, err := b.longTransactions(ctx)
		switch {
		case isMySQLError(err, errAccessDenied):
			denied = append(denied, "the long-transaction check")
		case err != nil:
			return outbox.Health{}, b.opsError(ctx, op, err)
		default:
			h.Warnings = append(h.Warnings, ws...)
		}
	}
	if len(denied) > 0 {
		h.Warnings = append(h.Warnings, outbox.HealthWarning{Code: "health-unchecked",
			Message: fmt.Sprintf("%s: %s %s off: the database user lacks the PROCESS privilege, which reading information_schema.INNODB_TRX and INNODB_METRICS needs; grant it (GRANT PROCESS ON *.* TO the relay's user) to be told of transactions that keep InnoDB from purging the outbox's deleted rows",
				pkgName, joinAnd(denied), isAre(len(denied)))})
	}
	return h, nil
}

func (b *Backend) healthTables(ctx context.Context) ([]outbox.TableHealth, error) {
	rows, err := b.db.QueryContext(ctx, healthTables, b.opts.Table, b.opts.Table+"_archive")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outbox.TableHealth
	for rows.Next() {
		var schema, name string
		var data, index, live int64
		if err := rows.Scan(&schema, &name, &data, &index, &live); err != nil {
			return nil, err
		}
		out = append(out, outbox.TableHealth{Name: schema + "." + name, Bytes: data + index,
			LiveRows: live, DeadRows: -1, Vacuums: -1})
	}
	return out, rows.Err()
}

// purgeLag reads the history list length and returns the purge-lag
// warning when it is over Options.PurgeLag (nil when not, or when the
// server reports no length).
func (b *Backend) purgeLag(ctx context.Context) (*outbox.HealthWarning, error) {
	n, ok, err := b.historyLength(ctx)
	if err != nil || !ok || n <= b.opts.PurgeLag {
		return nil, err
	}
	return &outbox.HealthWarning{Code: "purge-lag", Object: "server",
		Message: fmt.Sprintf("%s: InnoDB's history list length is %d (over %d): the purge of old row versions is behind, so the outbox's deleted rows are not reclaimed and its table and indexes grow; usually a long transaction holds it back: find it with SELECT trx_mysql_thread_id, trx_started FROM information_schema.INNODB_TRX ORDER BY trx_started, and end it (COMMIT, or KILL <thread id>)",
			pkgName, n, b.opts.PurgeLag)}, nil
}

// historyLength reads the history list length from INNODB_METRICS, or,
// when that is denied, from MariaDB's status variable (ok false when
// neither has it; the error of INNODB_METRICS when both fail).
func (b *Backend) historyLength(ctx context.Context) (n int64, ok bool, err error) {
	err = b.db.QueryRowContext(ctx, healthHistory).Scan(&n)
	if err == nil {
		return n, true, nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if !isMySQLError(err, errAccessDenied) {
		return 0, false, err
	}
	var name string
	if serr := b.db.QueryRowContext(ctx, healthHistoryStatus).Scan(&name, &n); serr == nil {
		return n, true, nil
	}
	return 0, false, err
}

// longTransactions returns a long-transaction warning for each of the
// oldest transactions open longer than Options.LongTransaction.
func (b *Backend) longTransactions(ctx context.Context) ([]outbox.HealthWarning, error) {
	rows, err := b.db.QueryContext(ctx, healthLongTrx, b.opts.LongTransaction.Microseconds(), maxLongTrx)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outbox.HealthWarning
	for rows.Next() {
		var thread, ageUS int64
		var user, host, db string
		if err := rows.Scan(&thread, &ageUS, &user, &host, &db); err != nil {
			return nil, err
		}
		age := (time.Duration(ageUS) * time.Microsecond).Round(time.Second)
		who := "user " + user + "@" + host
		if user == "" {
			who = "an unknown user"
		}
		if db != "" {
			who += ", database " + db
		}
		out = append(out, outbox.HealthWarning{Code: "long-transaction", Object: fmt.Sprintf("thread %d", thread),
			Message: fmt.Sprintf("%s: a transaction of thread %d (%s) has been open for %s (over %s): InnoDB cannot purge the row versions it may still read, in any table, so the outbox's deleted rows pile up until it ends; commit or roll it back, or end it with KILL %d",
				pkgName, thread, who, age, b.opts.LongTransaction, thread)})
	}
	return out, rows.Err()
}

// joinAnd joins two or fewer phrases with "and".
func joinAnd(s []string) string {
	if len(s) == 2 {
		return s[0] + " and " + s[1]
	}
	return s[0]
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}
