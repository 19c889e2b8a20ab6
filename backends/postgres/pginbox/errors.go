package pginbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outbox/inbox"
)

// retryableCodes are the SQLSTATEs after which running the transaction
// again from the start may succeed: serialization_failure (40001, a
// REPEATABLE READ or SERIALIZABLE conflict, or a concurrent insert of an
// ID or key newer than the snapshot), deadlock_detected (40P01) and
// lock_not_available (55P03, lock_timeout).
var retryableCodes = map[string]bool{"40001": true, "40P01": true, "55P03": true}

// retryable implements Retryable for both stores.
//
// A commit whose connection breaks (pgx: "conn closed", an io error, a
// timeout) is deliberately not retryable: the server may have committed
// before the connection broke, so the outcome is unknown. The Inbox
// returns the error instead of running the transaction again; the
// consumer does not acknowledge the message, the broker redelivers it,
// and the redelivery finds the ID recorded (a Duplicate) if the commit
// happened, or applies it if it did not. Either way its effects commit
// once.
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && retryableCodes[pgErr.Code]
}

// interpretError maps a native error of method op to the store's: context
// errors pass through unwrapped, a missing table says how to create it,
// everything else is wrapped with the package and method name.
func interpretError(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return ctxErr
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Errorf("pginbox: %s: %w (create the inbox's tables with pginbox.Migrate or 'outbox migrate up --inbox')", op, err)
	}
	return fmt.Errorf("pginbox: %s: %w", op, err)
}

// checkText rejects what a PostgreSQL text value cannot hold (NUL, bytes
// that are not UTF-8) and, for IDs, the empty string, before a round trip.
func checkText(op, what string, vals []string, allowEmpty bool) error {
	for _, v := range vals {
		switch {
		case v == "" && !allowEmpty:
			return fmt.Errorf("pginbox: %s got an empty %s; every message needs the outbox entry's ID: %w", op, what, inbox.ErrInvalidMessage)
		case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
			return fmt.Errorf("pginbox: %s got the %s %q, which is not UTF-8 text without NUL, as PostgreSQL text requires: %w", op, what, v, inbox.ErrInvalidMessage)
		}
	}
	return nil
}

// errNilTx is the complaint about a nil transaction.
func errNilTx(op string) error {
	return fmt.Errorf("pginbox: %s: tx is nil; call it inside InTx with the transaction InTx gives: %w", op, inbox.ErrInvalidArgument)
}

// errLimit is the complaint about a Purge limit below 1.
func errLimit(limit int) error {
	return fmt.Errorf("pginbox: Purge limit %d, want at least 1: %w", limit, inbox.ErrInvalidArgument)
}
