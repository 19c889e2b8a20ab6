package mysqlinbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// These Examples run against the MySQL or MariaDB server at
// OUTBOX_MYSQL_URL, each in a database of its own that it drops at the
// end (TestMain leaves them out when no server answers; see
// examplesNeedMySQL).

// A consumer applies each message's effect once, in its own transaction,
// though the broker delivers one message twice.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// db is what sql.Open("mysql", "user:password@tcp(host:3306)/app")
	// returns; the example uses a database of its own, dropped at the end.
	db, drop := exampleDB(ctx)
	if db == nil {
		return
	}
	defer drop()

	// Once per deploy, safe from every replica: create the inbox tables.
	if err := mysqlinbox.Migrate(ctx, db, mysqlinbox.Options{}); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE balances (account VARCHAR(64) PRIMARY KEY, cents BIGINT NOT NULL)"); err != nil {
		fmt.Println("create table:", err)
		return
	}

	store, err := mysqlinbox.New(db, mysqlinbox.Options{})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer store.Close()
	ib, err := inbox.New(store, inbox.Options{})
	if err != nil {
		fmt.Println("inbox:", err)
		return
	}

	// The handler writes its effect through tx: it commits with the
	// record of the message's ID, or not at all.
	credit := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO balances (account, cents) VALUES (?, 100) ON DUPLICATE KEY UPDATE cents = cents + 100", m.Key)
		return err
	}
	deliveries := []inbox.Message{
		{ID: "entry-1", Key: "acct-1", Seq: 1},
		{ID: "entry-2", Key: "acct-1", Seq: 2},
		{ID: "entry-1", Key: "acct-1", Seq: 1}, // redelivered
	}
	for _, m := range deliveries {
		r, err := ib.Handle(ctx, m, credit)
		if err != nil {
			fmt.Println("handle:", err) // do not acknowledge: the broker delivers it again
			return
		}
		fmt.Println(m.ID, r.Outcome) // now acknowledge it
	}
	var cents int
	if err := db.QueryRowContext(ctx, "SELECT cents FROM balances WHERE account = 'acct-1'").Scan(&cents); err != nil {
		fmt.Println("read:", err)
		return
	}
	fmt.Println("acct-1 cents:", cents)
	// Output:
	// entry-1 applied
	// entry-2 applied
	// entry-1 duplicate
	// acct-1 cents: 200
}

// Inbox.Apply records messages inside a transaction you began and
// commit yourself; the janitor (inbox.PurgeOnce, or RunJanitor in the
// background) removes records older than the retention.
func Example_apply() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, drop := exampleDB(ctx)
	if db == nil {
		return
	}
	defer drop()
	if err := mysqlinbox.Migrate(ctx, db, mysqlinbox.Options{Table: "payments_inbox"}); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	store, err := mysqlinbox.New(db, mysqlinbox.Options{Table: "payments_inbox"})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer store.Close()
	ib, err := inbox.New(store, inbox.Options{})
	if err != nil {
		fmt.Println("inbox:", err)
		return
	}
	noEffect := func(context.Context, *sql.Tx, inbox.Message) error { return nil }

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fmt.Println("begin:", err)
		return
	}
	results, err := ib.Apply(ctx, tx, []inbox.Message{{ID: "a"}, {ID: "b"}, {ID: "a"}}, noEffect)
	if err != nil {
		_ = tx.Rollback()
		fmt.Println("apply:", err)
		return
	}
	if err := tx.Commit(); err != nil { // the results hold once this commits
		fmt.Println("commit:", err)
		return
	}
	fmt.Println(results[0].Outcome, results[1].Outcome, results[2].Outcome)

	// The janitor keeps records for the retention (longer than the
	// broker's retention: a Kafka topic's default is 7 days), so these,
	// just written, stay.
	ids, keys, err := inbox.PurgeOnce(ctx, store, inbox.JanitorOptions{Retention: 8 * 24 * time.Hour})
	fmt.Println("purged:", ids, keys, err)
	// Output:
	// applied applied duplicate
	// purged: 0 0 <nil>
}

// MigrationSQL renders the migrations for a migration tool of your own,
// with the table names of Options.Table.
func ExampleMigrationSQL() {
	s, err := mysqlinbox.MigrationSQL(mysqlinbox.Options{Table: "orders_inbox"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "CREATE TABLE") {
			fmt.Println(line)
		}
	}
	// Output:
	// CREATE TABLE IF NOT EXISTS `orders_inbox` (
	// CREATE TABLE IF NOT EXISTS `orders_inbox_keyseq` (
	// CREATE TABLE IF NOT EXISTS `orders_inbox_offsets` (
}

// exampleDB creates a database of its own on the server at
// OUTBOX_MYSQL_URL and returns a pool on it and a function that drops it,
// or a nil pool after printing why (which fails the Example).
func exampleDB(ctx context.Context) (*sql.DB, func()) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "mysqlinbox_example_" + hex.EncodeToString(rnd[:])
	admin, err := sql.Open("mysql", testenv.MySQLDSN(""))
	if err != nil {
		fmt.Println("connect:", err)
		return nil, nil
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		admin.Close()
		fmt.Println("create database:", err)
		return nil, nil
	}
	db, err := sql.Open("mysql", testenv.MySQLDSN(name))
	if err != nil {
		admin.Close()
		fmt.Println("connect:", err)
		return nil, nil
	}
	return db, func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			fmt.Println("drop database:", err)
		}
		admin.Close()
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	examplesNeedMySQL()
	os.Exit(m.Run())
}

// examplesNeedMySQL makes the Examples runnable or leaves them out. They
// run against a real server and compare what they print with their Output
// comments, and an Example cannot skip itself. So TestMain checks once
// that the server answers: when it does not and OUTBOX_REQUIRE_SERVICES is
// not 1, every Example is left out through -test.skip, and this says so on
// stderr. With OUTBOX_REQUIRE_SERVICES=1 they run anyway and fail, as the
// tests do.
func examplesNeedMySQL() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", testenv.MySQLDSN(""))
	if err == nil {
		err = db.PingContext(ctx)
		db.Close()
	}
	if err == nil || testenv.Required() {
		return
	}
	testenv.SkipExamples("mysqlinbox", "MySQL", "no server answers ("+err.Error()+"); set OUTBOX_MYSQL_URL or run ./scripts/services.sh start")
}
