package mysqloutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// sessionCounters reads the session's statement counters through tx's
// connection; the SHOW itself counts one Question.
func sessionCounters(t *testing.T, tx *sql.Tx) (questions, prepares int) {
	t.Helper()
	rows, err := tx.Query("SHOW SESSION STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_prepare')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var v int
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		switch k {
		case "Questions":
			questions = v
		case "Com_stmt_prepare":
			prepares = v
		}
	}
	return questions, prepares
}

// TestAppendRoundTrips counts the statements an append sends on a
// connection that ran it before: each is one round trip, prepared once.
// Without Options.KeySequence an append that inserts rows is one
// statement.
func TestAppendRoundTrips(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		opts    mysqloutbox.Options
		entries int
		want    int
	}{
		{"One", mysqloutbox.Options{}, 1, 1},
		{"KeySequenceNoKey", mysqloutbox.Options{KeySequence: true}, 1, 3},
		{"Hundred", mysqloutbox.Options{}, 100, 1},
		// Every ID exists: the insert, the seal's check, the insert again.
		{"HundredExisting", mysqloutbox.Options{}, 100, 3},
		{"KeySequenceOneKey", mysqloutbox.Options{KeySequence: true}, 1, 4},
		{"KeySequenceHundredManyKeys", mysqloutbox.Options{KeySequence: true}, 100, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, db := newBackend(t, c.opts)
			db.SetMaxOpenConns(1) // every transaction on the same, warmed connection
			ctx := context.Background()
			for round := range 4 {
				time.Sleep(50 * time.Millisecond) // a new shape is prepared in the background
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				es := make([]outbox.Entry, c.entries)
				for i := range es {
					es[i] = outbox.Entry{ID: fmt.Sprintf("r%d-%d", round, i), Topic: "t", Key: fmt.Sprint("k", i%7)}
					if c.name == "HundredExisting" {
						es[i].ID = fmt.Sprintf("r0-%d", i)
					}
					if c.name == "KeySequenceNoKey" {
						es[i].Key = ""
					}
				}
				q0, p0 := sessionCounters(t, tx)
				if err := b.AppendInTx(ctx, tx, es...); err != nil {
					t.Fatal(err)
				}
				q1, p1 := sessionCounters(t, tx)
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if round > 1 && (q1-q0-1 != c.want || p1 != p0) {
					t.Fatalf("round %d: the append sent %d statements and %d prepares; want %d and none", round, q1-q0-1, p1-p0, c.want)
				}
			}
		})
	}
}
