package mysqloutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox"
)

// Backend is the MySQL and MariaDB outbox backend: an
// [outbox.Backend] over a database/sql pool of go-sql-driver/mysql
// connections, whose transaction type is *sql.Tx. Make one with [New]. It
// is safe for concurrent use.
type Backend struct {
	db    *sql.DB
	opts  Options
	names names

	// core is the state of the appends, leases, membership and
	// notifications (core.go); relay that of fetching and recording
	// outcomes (relay.go); ops that of the operator and move interfaces
	// (ops.go).
	core  coreState
	relay relayState
	ops   opsState

	closed atomic.Bool
}

// New returns a Backend storing entries in the tables [Migrate] creates
// in the database db connects to. It reads the partition count stored
// with the outbox (one query): Options.Partitions 0 takes it, any other
// value must equal it, else New fails with an
// [*outbox.PartitionMismatchError]. When the outbox does not exist the
// error says so and how to create it. db stays the caller's: Close never
// closes it.
func New(ctx context.Context, db *sql.DB, opts Options) (*Backend, error) {
	if db == nil {
		return nil, errors.New("mysqloutbox: New: db is nil; pass a *sql.DB from sql.Open(\"mysql\", dsn)")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	n := newNames(opts.Table)
	stored, err := readPartitions(ctx, db, n)
	if err != nil {
		return nil, err
	}
	if opts.Partitions != 0 && opts.Partitions != stored {
		return nil, fmt.Errorf("mysqloutbox: New: %w", &outbox.PartitionMismatchError{Outbox: n.outbox, Configured: opts.Partitions, Stored: stored})
	}
	opts.Partitions = stored
	b := &Backend{db: db, opts: opts, names: n}
	if err := b.initCore(ctx); err != nil {
		return nil, err
	}
	if err := b.initRelay(ctx); err != nil {
		b.closeCore()
		return nil, err
	}
	if err := b.initOps(ctx); err != nil {
		b.closeRelay()
		b.closeCore()
		return nil, err
	}
	return b, nil
}

// readPartitions reads the partition count stored with the outbox.
func readPartitions(ctx context.Context, db *sql.DB, n names) (int, error) {
	var count int
	err := db.QueryRowContext(ctx, n.render("SELECT partitions FROM {meta} WHERE one = 1")).Scan(&count)
	switch {
	case err == nil:
		return count, nil
	case errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("mysqloutbox: New: the outbox %s has no stored partition count (%s is empty): run mysqloutbox.Migrate(ctx, db, opts) with Options.Partitions set to the count its appenders and relays use",
			n.outbox, n.meta)
	case isMySQLError(err, errNoSuchTable):
		return 0, fmt.Errorf("mysqloutbox: New: the outbox does not exist: there is no table %s in this database: create it with mysqloutbox.Migrate(ctx, db, mysqloutbox.Options{Table: ..., Partitions: N}) or \"outbox migrate up --partitions N\", or check Options.Table and the database of the DSN: %w",
			n.meta, err)
	case isMySQLError(err, errNoDatabase):
		return 0, fmt.Errorf("mysqloutbox: New: the connection has no database selected: name one in the DSN (user:password@tcp(host:3306)/DATABASE): %w", err)
	}
	return 0, fmt.Errorf("mysqloutbox: New: reading the partition count of %s: %w", n.outbox, err)
}

// Partitions reports the partition count stored with the outbox (which
// Options.Partitions, when set, equals).
func (b *Backend) Partitions() int { return b.opts.Partitions }

// Close makes every method return [outbox.ErrClosed] and closes the
// Notifications channels. It never closes db. It is idempotent.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.closeRelay()
	b.closeCore()
	return nil
}

func (b *Backend) checkOpen(op string) error {
	if b.closed.Load() {
		return fmt.Errorf("mysqloutbox: %s: %w", op, outbox.ErrClosed)
	}
	return nil
}

// MySQL and MariaDB error numbers the backend tells apart.
const (
	errNoDatabase    = 1046 // ER_NO_DB_ERROR
	errDupEntry      = 1062 // ER_DUP_ENTRY
	errDupColumn     = 1060 // ER_DUP_FIELDNAME
	errCantDrop      = 1091 // ER_CANT_DROP_FIELD_OR_KEY
	errAccessDenied  = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR (PROCESS)
	errNoSuchTable   = 1146 // ER_NO_SUCH_TABLE
	errBadField      = 1054 // ER_BAD_FIELD_ERROR
	errLockWait      = 1205 // ER_LOCK_WAIT_TIMEOUT
	errDeadlock      = 1213 // ER_LOCK_DEADLOCK
	errQueryKilled   = 1317 // ER_QUERY_INTERRUPTED
	errConnKilled    = 1927 // ER_CONNECTION_KILLED (MariaDB)
	errServerKilled  = 1053 // ER_SERVER_SHUTDOWN
	errCheckViolated = 4025 // ER_CONSTRAINT_FAILED (MariaDB); MySQL: 3819
)

// isMySQLError reports whether err is a server error with the number.
func isMySQLError(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}

// The backend exchanges every time with the server as microseconds since
// the Unix epoch, converted in SQL (epochSQL), so that no DSN setting
// (parseTime, loc) and no session time_zone changes what is stored: the
// columns hold UTC.
const (
	// epochSQL is the Unix epoch as a DATETIME literal.
	epochSQL = "'1970-01-01 00:00:00'"
	// nowSQL is the server's clock, UTC, with microseconds.
	nowSQL = "UTC_TIMESTAMP(6)"
)

// toMicros is t as microseconds since the Unix epoch.
func toMicros(t time.Time) int64 { return t.UnixMicro() }

// fromMicros is the time of us microseconds since the Unix epoch, UTC.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// microsOf is the SQL that reads a DATETIME(6) column (or expression) as
// microseconds since the Unix epoch.
func microsOf(col string) string {
	return "TIMESTAMPDIFF(MICROSECOND, " + epochSQL + ", " + col + ")"
}

// datetimeOf is the SQL that turns a microseconds parameter (or
// expression) into a DATETIME(6).
func datetimeOf(us string) string {
	return "TIMESTAMPADD(MICROSECOND, " + us + ", " + epochSQL + ")"
}
