package pgoutbox

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outbox"
)

// SQLExecer is the part of a database/sql transaction AppendInSQLTx uses;
// *sql.Tx implements it. When the value also has QueryRowContext (as
// *sql.Tx does), appends are rate-limited in their notifications like
// [Backend.AppendInTx]; otherwise each appending transaction notifies.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// sqlQueryRower is the optional part of a SQLExecer that lets an append
// read its transaction ID back for a trailing notification.
type sqlQueryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// AppendInSQLTx is [Backend.AppendInTx] for callers that hold a
// database/sql transaction (*sql.Tx) instead of a pgx.Tx: the same
// multi-row statement (also for one entry), the same contract. It passes
// every argument as a PostgreSQL array literal in a string, so it works
// with any PostgreSQL driver (pgx's stdlib, lib/pq). The tx must be on the
// database the Backend's pool points at.
func (b *Backend) AppendInSQLTx(ctx context.Context, tx SQLExecer, entries ...outbox.Entry) error {
	if err := b.checkOpen("AppendInSQLTx"); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if tx == nil {
		return fmt.Errorf("pgoutbox: AppendInSQLTx: tx is nil; pass your *sql.Tx: %w", outbox.ErrInvalidArgument)
	}
	rows, err := b.appendRows(ctx, entries)
	if err != nil {
		return err
	}
	if locks := b.keyLocks(rows.keys); locks != nil {
		lit := make([]string, len(locks))
		for i, l := range locks {
			lit[i] = strconv.FormatInt(l, 10)
		}
		if _, err := tx.ExecContext(ctx, keyLocksSQL, "{"+strings.Join(lit, ",")+"}"); err != nil {
			return b.interpretError("AppendInSQLTx", err)
		}
	}
	args := []any{
		textArray(rows.ids),
		intArray(rows.parts),
		textArray(rows.topics),
		byteaArray(rows.keys),
		byteaArray(rows.payloads),
		byteaArray(rows.headers),
		timeArray(rows.notBefore),
	}
	qr, canTrail := tx.(sqlQueryRower)
	return b.runAppend("AppendInSQLTx", &b.qAppend, args, canTrail,
		func(q string, args []any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		},
		func(q string, args []any) (int64, string, error) {
			var xid int64
			var parts string
			err := qr.QueryRowContext(ctx, q, args...).Scan(&xid, &parts)
			if errors.Is(err, sql.ErrNoRows) {
				err = errNothingInserted
			}
			return xid, parts, err
		})
}

func arrayLiteral(n int, elem func(i int, sb *strings.Builder)) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		elem(i, &sb)
	}
	sb.WriteByte('}')
	return sb.String()
}

func quoteElem(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, r := range s {
		if r == '"' || r == '\\' {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	sb.WriteByte('"')
}

func textArray(v []string) string {
	return arrayLiteral(len(v), func(i int, sb *strings.Builder) { quoteElem(sb, v[i]) })
}

func intArray(v []int32) string {
	return arrayLiteral(len(v), func(i int, sb *strings.Builder) { sb.WriteString(strconv.Itoa(int(v[i]))) })
}

func byteaArray(v [][]byte) string {
	return arrayLiteral(len(v), func(i int, sb *strings.Builder) {
		if v[i] == nil {
			sb.WriteString("NULL")
			return
		}
		quoteElem(sb, `\x`+hex.EncodeToString(v[i]))
	})
}

func timeArray(v []pgtype.Timestamptz) string {
	return arrayLiteral(len(v), func(i int, sb *strings.Builder) {
		if !v[i].Valid {
			sb.WriteString("NULL")
			return
		}
		quoteElem(sb, v[i].Time.UTC().Format("2006-01-02 15:04:05.999999Z07:00"))
	})
}
