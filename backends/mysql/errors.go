package mysqloutbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox"
)

// interpretError maps driver and server errors to the package's errors,
// in one place: an error after Close wraps [outbox.ErrClosed]; missing
// tables (run Migrate), an older layout, deadlocks
// and lock wait timeouts (retry the transaction, see [Retryable]),
// duplicate keys, a lost connection and a killed query. The driver's
// error stays wrapped, and context errors stay checkable with errors.Is.
func (b *Backend) interpretError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("mysqloutbox: %s: %w", op, err)
	}
	if b.closed.Load() { // a call that raced Close met a closed statement
		return fmt.Errorf("mysqloutbox: %s: %w (%v)", op, outbox.ErrClosed, err)
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		if msg := b.serverErrorText(me.Number); msg != "" {
			return fmt.Errorf("mysqloutbox: %s: %s: %w", op, msg, err)
		}
		return fmt.Errorf("mysqloutbox: %s: %w", op, err)
	}
	if connectionLost(err) {
		return fmt.Errorf("mysqloutbox: %s: the connection to the server was lost (the server went away, restarted or killed the session, or the network failed); whatever the statement did is undone unless its transaction had committed: check the server and retry: %w", op, err)
	}
	return fmt.Errorf("mysqloutbox: %s: %w", op, err)
}

// serverErrorText says what a server error number means for the caller
// and what to do, or "" for numbers without advice.
func (b *Backend) serverErrorText(number uint16) string {
	switch number {
	case errNoSuchTable:
		return fmt.Sprintf("a table of the outbox %s does not exist: run mysqloutbox.Migrate(ctx, db, opts) with the same Options.Table (or \"outbox migrate up\"), and check the database the DSN names", b.names.outbox)
	case errBadField:
		return fmt.Sprintf("the outbox %s has an older layout: run mysqloutbox.Migrate to bring it up to date", b.names.outbox)
	case errDeadlock:
		return "the server rolled back the whole transaction to break a deadlock: run the transaction again from its start (Backend.InTx does so)"
	case errLockWait:
		return "a statement waited longer than innodb_lock_wait_timeout for a lock and was rolled back (the whole transaction when innodb_rollback_on_timeout is on): roll back the transaction and run it again (Backend.InTx does so)"
	case errDupEntry:
		return "a row with the same key already exists"
	case errQueryKilled, errConnKilled, errServerKilled:
		return "the server killed the query or the connection (KILL, a shutdown or a timeout): check the server and retry"
	}
	return ""
}

// connectionLost reports whether err means the connection broke.
func connectionLost(err error) bool {
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// Retryable reports whether err means the transaction it happened in
// must be run again from its start: the server broke a deadlock by
// rolling it back (error 1213), or a statement waited longer than
// innodb_lock_wait_timeout for a lock (error 1205), or, with
// Options.KeySequence, an append met an ID that a concurrent transaction
// appended and committed while it waited. Roll the transaction back (if
// the server has not) and run it again; [Backend.InTx] does so itself, a
// bounded number of times.
func Retryable(err error) bool {
	var concurrent *concurrentIDError
	return isMySQLError(err, errDeadlock) || isMySQLError(err, errLockWait) || errors.As(err, &concurrent)
}

// sealedError is the error of an append to a sealed outbox.
func (b *Backend) sealedError(op string) error {
	return fmt.Errorf("mysqloutbox: %s: the outbox %s is sealed: it was moved to another outbox (outbox move); append to its destination instead, or unseal it (outbox move --unseal) to append here again: %w",
		op, b.names.outbox, outbox.ErrSealed)
}

// leaseLost is the error of a fenced call whose lease is no longer held.
func leaseLost(op string, l outbox.Lease) error {
	return fmt.Errorf("mysqloutbox: %s: partition %d, owner %q, version %d: %w", op, l.Partition, l.Owner, l.Version, outbox.ErrLeaseLost)
}

// argErr wraps an argument check's error with the package and operation.
func argErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("mysqloutbox: %s: %w", op, err)
}
