package pginbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/inbox"
)

// These Examples run against the PostgreSQL at OUTBOX_POSTGRES_URL, each in
// a schema of its own that it drops at the end (TestMain leaves them out
// when no server answers; see examplesNeedPostgres).

// A consumer credits an account once per message, though the broker
// delivers one of them twice: the record of the ID and the credit commit
// in one pgx transaction.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("OUTBOX_POSTGRES_URL"))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer pool.Close()

	// Once per deploy, safe from every replica. (The example uses a
	// schema of its own, dropped at the end; yours is likely "public",
	// the default.)
	opts := pginbox.Options{Schema: exampleSchema()}
	defer dropSchema(pool, opts.Schema)
	if err := pginbox.Migrate(ctx, pool, opts); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	accounts := pgx.Identifier{opts.Schema, "accounts"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id text PRIMARY KEY, balance int NOT NULL); INSERT INTO "+accounts+" VALUES ('acct-1', 0)"); err != nil {
		fmt.Println("create table:", err)
		return
	}

	store, err := pginbox.New(pool, opts)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	ib, err := inbox.New(store, inbox.Options{})
	if err != nil {
		fmt.Println("inbox:", err)
		return
	}
	credit := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, "UPDATE "+accounts+" SET balance = balance + 10 WHERE id = $1", m.Key)
		return err
	}
	for _, id := range []string{"entry-1", "entry-2", "entry-1"} {
		r, err := ib.Handle(ctx, inbox.Message{ID: id, Key: "acct-1"}, credit)
		if err != nil {
			fmt.Println("handle:", err) // do not acknowledge: the broker delivers it again
			return
		}
		fmt.Println(id, r.Outcome)
	}
	var balance int
	if err := pool.QueryRow(ctx, "SELECT balance FROM "+accounts).Scan(&balance); err != nil {
		fmt.Println("read:", err)
		return
	}
	fmt.Println("balance", balance)
	// Output:
	// entry-1 applied
	// entry-2 applied
	// entry-1 duplicate
	// balance 20
}

// The same consumer on database/sql (pgx's stdlib driver), with the
// offset of each message stored in the same transaction as its effect.
func ExampleNewSQL() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("OUTBOX_POSTGRES_URL"))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer pool.Close()
	opts := pginbox.Options{Schema: exampleSchema(), Table: "billing_inbox"}
	defer dropSchema(pool, opts.Schema)
	if err := pginbox.Migrate(ctx, pool, opts); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	events := pgx.Identifier{opts.Schema, "events"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+events+" (id text PRIMARY KEY)"); err != nil {
		fmt.Println("create table:", err)
		return
	}

	db, err := sql.Open("pgx", os.Getenv("OUTBOX_POSTGRES_URL"))
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer db.Close()
	store, err := pginbox.NewSQL(db, opts)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	ib, err := inbox.New(store, inbox.Options{})
	if err != nil {
		fmt.Println("inbox:", err)
		return
	}
	insert := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+events+" (id) VALUES ($1)", m.ID)
		return err
	}
	for i, id := range []string{"e-1", "e-2", "e-2"} {
		m := inbox.Message{ID: id, Offset: &inbox.Offset{Group: "billing", Topic: "orders", Partition: 0, Next: int64(i + 1)}}
		r, err := ib.Handle(ctx, m, insert)
		if err != nil {
			fmt.Println("handle:", err)
			return
		}
		fmt.Println(id, r.Outcome)
	}
	// On start (and on partition assignment), resume from the stored
	// offsets: the duplicate moved the position on too.
	next, err := store.Offsets(ctx, "billing", "orders")
	if err != nil {
		fmt.Println("offsets:", err)
		return
	}
	fmt.Println("resume partition 0 at", next[0])
	// Output:
	// e-1 applied
	// e-2 applied
	// e-2 duplicate
	// resume partition 0 at 3
}

// MigrationSQL renders the migrations for your own migration tool.
func ExampleMigrationSQL() {
	sql, err := pginbox.MigrationSQL(pginbox.Options{Schema: "billing", Table: "orders_inbox"})
	if err != nil {
		fmt.Println(err)
		return
	}
	first, _, _ := strings.Cut(sql, ",")
	fmt.Println(first)
	// Output:
	// -- pginbox migrations 001 to 001 for the inbox "billing"."orders_inbox"
}

func exampleSchema() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "pginbox_example_" + hex.EncodeToString(b[:])
}

func dropSchema(pool *pgxpool.Pool, schema string) {
	_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
}
