package mysqlinbox_test

import (
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/inbox/inboxtest"
)

// TestConformance runs the inbox store suite, each case with an inbox in
// a database of its own, at the server's default isolation level
// (REPEATABLE READ), at READ COMMITTED, and, on MariaDB servers that
// have it (10.6.18 and later; on by default from 11.6), with
// innodb_snapshot_isolation on, where a row changed after a
// transaction's snapshot fails its locking statements with error 1020
// (which Retryable accepts) instead of being read.
func TestConformance(t *testing.T) {
	t.Parallel()
	probe, _ := newDB(t)
	isolation := "transaction_isolation"
	if !serverHas(t, probe, isolation) {
		isolation = "tx_isolation" // MariaDB before 11.1
	}
	type variant struct {
		name        string
		tweak       func(*mysql.Config)
		check, want string // a session variable the tweak sets, and its value
	}
	variants := []variant{
		{"RepeatableRead", func(*mysql.Config) {}, isolation, "REPEATABLE-READ"},
		{"ReadCommitted", sessionVar(isolation, "'READ-COMMITTED'"), isolation, "READ-COMMITTED"},
	}
	if serverHas(t, probe, "innodb_snapshot_isolation") {
		variants = append(variants, variant{"SnapshotIsolation", sessionVar("innodb_snapshot_isolation", "ON"), "innodb_snapshot_isolation", "1"})
	}
	var dbs sync.Map // store -> its *sql.DB, for backdate
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			db, _ := newDB(t, v.tweak)
			var got string
			if err := db.QueryRow("SELECT @@SESSION." + v.check).Scan(&got); err != nil || got != v.want {
				t.Fatalf("@@SESSION.%s = %q, %v; want %q (the variant's DSN did not take)", v.check, got, err, v.want)
			}
			inboxtest.Run(t, inboxtest.Harness[*sql.Tx]{
				New: func(t *testing.T) inbox.Store[*sql.Tx] {
					s, db := newStore(t, mysqlinbox.Options{}, v.tweak)
					dbs.Store(s, db)
					return s
				},
				Backdate: func(t *testing.T, s inbox.Store[*sql.Tx], d time.Duration, ids, keys []string) {
					db, ok := dbs.Load(s)
					if !ok {
						t.Fatal("Backdate of a store the harness did not make")
					}
					backdate(t, db.(*sql.DB), d, ids, keys)
				},
			})
		})
	}
}

var _ inbox.Finisher[*sql.Tx] = (*mysqlinbox.Store)(nil)
