package pgoutbox

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outbox"
)

// SQLExecer is the part of a database/sql transaction AppendInSQLTx uses;
// *sql.Tx implements it.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// AppendInSQLTx is [Backend.AppendInTx] for callers that hold a
// database/sql transaction (*sql.Tx) instead of a pgx.Tx: the same single
// statement, the same contract. It passes every argument as a PostgreSQL
// array literal in a string, so it works with any PostgreSQL driver
// (pgx's stdlib, lib/pq). The tx must be on the database the Backend's
// pool points at.
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
	args, err := b.appendArgs(ctx, entries)
	if err != nil {
		return err
	}
	text := []any{
		textArray(args[0].([]string)),
		intArray(args[1].([]int32)),
		textArray(args[2].([]string)),
		byteaArray(args[3].([][]byte)),
		byteaArray(args[4].([][]byte)),
		byteaArray(args[5].([][]byte)),
		timeArray(args[6].([]pgtype.Timestamptz)),
		args[7],
	}
	_, err = tx.ExecContext(ctx, b.qAppend, text...)
	return b.interpretError("AppendInSQLTx", err)
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
