package mysqlinbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/go-sql-driver/mysql"
)

// Retryable reports whether err, returned by InTx or a method called in
// its transaction, means the transaction was (or must be) rolled back for
// a transient conflict and may succeed when run again from its start: the
// server broke a deadlock (error 1213), a statement waited longer than
// innodb_lock_wait_timeout for a row lock (error 1205), or MariaDB's
// innodb_snapshot_isolation found a row changed since the transaction's
// snapshot (error 1020). It is false for nil, for context errors and for
// a lost connection (a commit whose connection broke may have committed:
// running the handler's transaction again is still safe, since the
// recorded ID then reports the message as a duplicate, but that is the
// consumer's redelivery to make, not a conflict).
func (s *Store) Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return isMySQLError(err, errDeadlock) || isMySQLError(err, errLockWait) || isMySQLError(err, errCheckRead)
}

// interpretError maps driver and server errors to the package's errors,
// in one place: missing tables (run Migrate), deadlocks, lock wait
// timeouts and changed snapshots (run the transaction again, see
// [Store.Retryable]), a lost connection. The driver's error stays
// wrapped; context errors pass through unwrapped.
func (s *Store) interpretError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		if msg := s.serverErrorText(me.Number); msg != "" {
			return fmt.Errorf("mysqlinbox: %s: %s: %w", op, msg, err)
		}
		return fmt.Errorf("mysqlinbox: %s: %w", op, err)
	}
	if connectionLost(err) {
		return fmt.Errorf("mysqlinbox: %s: the connection to the server was lost (the server went away, restarted or killed the session, or the network failed); the transaction is rolled back unless its commit had reached the server: check the server, and let the broker redeliver the message (the inbox skips it if it committed): %w", op, err)
	}
	return fmt.Errorf("mysqlinbox: %s: %w", op, err)
}

// serverErrorText says what a server error number means for the caller
// and what to do, or "" for numbers without advice.
func (s *Store) serverErrorText(number uint16) string {
	switch number {
	case errNoSuchTable:
		return fmt.Sprintf("a table of the inbox %s does not exist: run mysqlinbox.Migrate(ctx, db, opts) with the same Options.Table (or \"outbox migrate up --inbox\"), and check the database the DSN names", s.n.inbox)
	case errDeadlock:
		return "the server rolled back the whole transaction to break a deadlock: run the transaction again from its start (inbox.Inbox.Handle does)"
	case errLockWait:
		return "a statement waited longer than innodb_lock_wait_timeout for a row lock another transaction holds: roll the transaction back and run it again (inbox.Inbox.Handle does)"
	case errCheckRead:
		return "a row changed after the transaction's snapshot (MariaDB innodb_snapshot_isolation): roll the transaction back and run it again (inbox.Inbox.Handle does)"
	}
	return ""
}

// connectionLost reports whether err means the connection broke.
func connectionLost(err error) bool {
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}
