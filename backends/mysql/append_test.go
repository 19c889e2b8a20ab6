package mysqloutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/internal/headercodec"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// appendedRow is an outbox row as the tests read it back with SQL.
type appendedRow struct {
	id, topic, key string
	partition      int
	payload        []byte
	headers        map[string]string
	delay          time.Duration // next_at - created_at
}

// readAppended returns the outbox rows in seq order.
func readAppended(t *testing.T, db *sql.DB) []appendedRow {
	t.Helper()
	rows, err := db.Query("SELECT id, topic, `key`, `partition`, payload, headers, TIMESTAMPDIFF(MICROSECOND, created_at, next_at) FROM outbox ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []appendedRow
	for rows.Next() {
		var r appendedRow
		var h []byte
		var us int64
		if err := rows.Scan(&r.id, &r.topic, &r.key, &r.partition, &r.payload, &h, &us); err != nil {
			t.Fatal(err)
		}
		if r.headers, err = headercodec.Decode("test", h); err != nil {
			t.Fatal(err)
		}
		r.delay = time.Duration(us) * time.Microsecond
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func rowIDs(rows []appendedRow) string {
	s := make([]string, len(rows))
	for i, r := range rows {
		s[i] = r.id
	}
	return strings.Join(s, ",")
}

// appendTx appends entries in a transaction of its own and commits.
func appendTx(t *testing.T, b *mysqloutbox.Backend, db *sql.DB, entries ...outbox.Entry) {
	t.Helper()
	if err := b.InTx(context.Background(), db, func(tx *sql.Tx) error {
		return b.AppendInTx(context.Background(), tx, entries...)
	}); err != nil {
		t.Fatal(err)
	}
}

func TestAppendIdempotentAndOrdered(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 4})
	ctx := context.Background()
	appendTx(t, b, db,
		outbox.Entry{ID: "a", Topic: "t", Key: "k1", Payload: []byte("first"), Headers: map[string]string{"h": "\x00v"}},
		outbox.Entry{ID: "b", Topic: "t", Key: "k2", Payload: []byte{0, 1, 2}},
		outbox.Entry{ID: "a", Topic: "t", Key: "k1", Payload: []byte("second")}, // first occurrence wins
	)
	appendTx(t, b, db,
		outbox.Entry{ID: "b", Topic: "t", Payload: []byte("again")}, // exists: a no-op
		outbox.Entry{ID: "c", Topic: "t", NotBefore: time.Now().Add(time.Hour)},
	)
	// A rolled-back append leaves nothing.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "d", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	rows := readAppended(t, db)
	if got := rowIDs(rows); got != "a,b,c" {
		t.Fatalf("stored IDs %s; want a,b,c in append order", got)
	}
	if string(rows[0].payload) != "first" || rows[0].headers["h"] != "\x00v" || rows[0].partition != outbox.PartitionOf("k1", 4) || rows[0].key != "k1" {
		t.Fatalf("row a: %+v", rows[0])
	}
	if string(rows[1].payload) != "\x00\x01\x02" || rows[1].headers != nil {
		t.Fatalf("row b: %+v", rows[1])
	}
	if rows[0].delay != 0 || rows[2].delay < 59*time.Minute || rows[2].delay > 61*time.Minute {
		t.Fatalf("next_at - created_at: %v for an unscheduled entry, %v for one an hour ahead", rows[0].delay, rows[2].delay)
	}
	if err := b.AppendInTx(ctx, nil, outbox.Entry{Topic: "t"}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("nil tx: %v", err)
	}
	if err := b.AppendInTx(ctx, nil); err != nil {
		t.Fatalf("no entries: %v", err)
	}
}

// TestAppendLargeCall appends more rows and bytes than one statement
// takes: every entry lands, in slice order.
func TestAppendLargeCall(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	var es []outbox.Entry
	for i := range 1203 {
		es = append(es, outbox.Entry{ID: fmt.Sprintf("e%05d", i), Topic: "t", Key: "k", Payload: make([]byte, 2000)})
	}
	es[7].Payload = make([]byte, 3<<20) // a single entry larger than a statement's budget
	appendTx(t, b, db, es...)
	rows := readAppended(t, db)
	if len(rows) != len(es) {
		t.Fatalf("%d rows stored; want %d", len(rows), len(es))
	}
	for i, r := range rows {
		if r.id != es[i].ID || len(r.payload) != len(es[i].Payload) {
			t.Fatalf("row %d is %s (%d bytes); want %s (%d bytes)", i, r.id, len(r.payload), es[i].ID, len(es[i].Payload))
		}
	}
}

// TestAppendLimits checks that Options.Limits apply.
func TestAppendLimits(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Limits: outbox.Limits{MaxPayload: 10}})
	err := b.InTx(context.Background(), db, func(tx *sql.Tx) error {
		return b.AppendInTx(context.Background(), tx, outbox.Entry{Topic: "t", Payload: make([]byte, 11)})
	})
	if !errors.Is(err, outbox.ErrInvalidEntry) {
		t.Fatalf("oversize payload: %v; want ErrInvalidEntry", err)
	}
}

// TestAppendSealFence seals the outbox while transactions of both
// isolation levels are open: an append in flight delays the seal until
// it commits, and an append after the seal fails with ErrSealed, even in
// a REPEATABLE READ transaction whose snapshot predates the seal.
func TestAppendSealFence(t *testing.T) {
	t.Parallel()
	for _, level := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
		t.Run(strings.ReplaceAll(level.String(), " ", ""), func(t *testing.T) {
			t.Parallel()
			b, db := newBackend(t, mysqloutbox.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			begin := func() *sql.Tx {
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
				if err != nil {
					t.Fatal(err)
				}
				var n int
				if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_meta WHERE sealed = 0").Scan(&n); err != nil || n != 1 {
					t.Fatalf("snapshot read: %d, %v", n, err)
				}
				return tx
			}
			inFlight := begin()
			if err := b.AppendInTx(ctx, inFlight, outbox.Entry{ID: "before", Topic: "t"}); err != nil {
				t.Fatal(err)
			}
			late := begin() // its snapshot says unsealed
			sealed := make(chan error, 1)
			go func() {
				_, err := db.ExecContext(ctx, "UPDATE outbox_meta SET sealed = 1 WHERE one = 1")
				sealed <- err
			}()
			select {
			case err := <-sealed:
				t.Fatalf("the seal did not wait for the append in flight (err %v)", err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := inFlight.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-sealed; err != nil {
				t.Fatal(err)
			}
			err := b.AppendInTx(ctx, late, outbox.Entry{ID: "after", Topic: "t"})
			late.Rollback()
			if !errors.Is(err, outbox.ErrSealed) {
				t.Fatalf("append after the seal: %v; want ErrSealed", err)
			}
			if got := rowIDs(readAppended(t, db)); got != "before" {
				t.Fatalf("stored %q; want only the append committed before the seal", got)
			}
		})
	}
}

// TestAppendDeadlockMappedAndRetried makes two transactions append two
// keys (with Options.KeySequence, whose counter rows they lock) in
// opposite orders: the server breaks the deadlock by rolling one back,
// AppendInTx reports it as Retryable, and InTx runs it again to success.
func TestAppendDeadlockMappedAndRetried(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2, KeySequence: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	appendTx(t, b, db, outbox.Entry{Topic: "t", Key: "k1"}, outbox.Entry{Topic: "t", Key: "k2"})

	// Bare transactions: one of them gets the deadlock error.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	ready := make(chan struct{}, 2)
	for i, keys := range [][2]string{{"k1", "k2"}, {"k2", "k1"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				errs[i] = err
				return
			}
			defer tx.Rollback()
			if err := b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t", Key: keys[0]}); err != nil {
				errs[i] = err
				return
			}
			ready <- struct{}{}
			for len(ready) < 2 && ctx.Err() == nil { // both hold their first key
				time.Sleep(time.Millisecond)
			}
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
			if err := b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t", Key: keys[1]}); err != nil {
				errs[i] = err
				return
			}
			errs[i] = tx.Commit()
		}()
	}
	wg.Wait()
	var dead error
	for _, err := range errs {
		if err != nil {
			dead = err
		}
	}
	if dead == nil || !mysqloutbox.Retryable(dead) || !strings.Contains(dead.Error(), "deadlock") {
		t.Fatalf("errors %v; want one deadlock error, Retryable, that says so", errs)
	}

	// The same through InTx: both succeed, one of them after a retry.
	var attempts [2]int
	first := make(chan struct{}, 2)
	for i, keys := range [][2]string{{"k1", "k2"}, {"k2", "k1"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.InTx(ctx, db, func(tx *sql.Tx) error {
				attempts[i]++
				if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: fmt.Sprintf("x%d-%d", i, attempts[i]), Topic: "t", Key: keys[0]}); err != nil {
					return err
				}
				if attempts[i] == 1 {
					first <- struct{}{}
					for len(first) < 2 && ctx.Err() == nil {
						time.Sleep(time.Millisecond)
					}
					time.Sleep(time.Duration(i) * 100 * time.Millisecond)
				}
				return b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t", Key: keys[1]})
			})
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("InTx: %v; want both to succeed", errs)
	}
	if attempts[0]+attempts[1] != 3 {
		t.Fatalf("attempts %v; want one transaction run again once", attempts)
	}
	checkKeySeqs(t, db)
}

// TestAppendLockWaitTimeoutIsRetryable appends a key whose counter
// another transaction holds, with innodb_lock_wait_timeout at 1 s.
func TestAppendLockWaitTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{KeySequence: true})
	ctx := context.Background()
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if err := b.AppendInTx(ctx, holder, outbox.Entry{Topic: "t", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	err = b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t", Key: "k"})
	if !mysqloutbox.Retryable(err) || !strings.Contains(err.Error(), "innodb_lock_wait_timeout") {
		t.Fatalf("append waiting for a held key: %v; want a Retryable lock wait timeout that says so", err)
	}
}

// keySeqs returns the key sequence numbers of each key's stored entries,
// in seq order.
func keySeqs(t *testing.T, db *sql.DB) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	for _, r := range readAppended(t, db) {
		v, ok := r.headers[outbox.HeaderKeySeq]
		if r.key == "" {
			if ok {
				t.Fatalf("entry %s has no key but sequence %q", r.id, v)
			}
			continue
		}
		n, err := outbox.ParseKeySeq(v)
		if !ok || err != nil {
			t.Fatalf("entry %s of key %q: sequence %q (%v)", r.id, r.key, v, err)
		}
		out[r.key] = append(out[r.key], n)
	}
	return out
}

// checkKeySeqs fails unless each key's numbers are 1, 2, 3, ... in seq
// order.
func checkKeySeqs(t *testing.T, db *sql.DB) map[string][]int64 {
	t.Helper()
	seqs := keySeqs(t, db)
	for k, ns := range seqs {
		for i, n := range ns {
			if n != int64(i+1) {
				t.Fatalf("key %q has sequence numbers %v; want 1..%d in append order", k, ns, len(ns))
			}
		}
	}
	return seqs
}

// TestKeySequenceConcurrent runs 8 appenders of overlapping keys, some of
// whose transactions roll back: each key's committed entries are numbered
// 1..n without gap or repeat, in append order, and idempotent re-appends
// take no number.
func TestKeySequenceConcurrent(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 3, KeySequence: true})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	keys := []string{"alpha", "beta", "gamma", "delta"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	committed := map[string]int{}
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				var es []outbox.Entry
				count := map[string]int{}
				for j := range 1 + (g+i)%3 {
					k := keys[(g+i+j)%len(keys)]
					es = append(es, outbox.Entry{ID: fmt.Sprintf("g%d-%d-%d", g, i, j), Topic: "t", Key: k})
					count[k]++
				}
				es = append(es, outbox.Entry{ID: fmt.Sprintf("g%d-%d-nokey", g, i), Topic: "t"}, es[0]) // repeat: no number
				rollBack := i%4 == 3
				err := b.InTx(ctx, db, func(tx *sql.Tx) error {
					if err := b.AppendInTx(ctx, tx, es...); err != nil {
						return err
					}
					if rollBack {
						return errRollback
					}
					return nil
				})
				if rollBack && errors.Is(err, errRollback) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for k, n := range count {
					committed[k] += n
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A committed re-append of existing IDs takes no number.
	appendTx(t, b, db, outbox.Entry{ID: "g0-0-0", Topic: "t", Key: keys[0]})
	seqs := checkKeySeqs(t, db)
	for _, k := range keys {
		if len(seqs[k]) != committed[k] {
			t.Fatalf("key %q has %d numbered entries; %d were committed", k, len(seqs[k]), committed[k])
		}
	}
	// A caller cannot set the header itself.
	err := b.InTx(ctx, db, func(tx *sql.Tx) error {
		return b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t", Key: "k", Headers: map[string]string{outbox.HeaderKeySeq: "7"}})
	})
	if !errors.Is(err, outbox.ErrInvalidEntry) {
		t.Fatalf("an entry with its own %s header: %v; want ErrInvalidEntry", outbox.HeaderKeySeq, err)
	}
}

var errRollback = errors.New("roll back on purpose")

// waitForLockWait waits until the session connID waits for a lock: it has
// been running one statement for a second or more (PROCESSLIST, command
// Query, or Execute for a prepared statement, which the driver uses for
// statements with arguments), which in these tests only a statement
// blocked on the other transaction's lock does. PROCESSLIST is read live;
// INNODB_TRX is not read: it is refreshed only when nobody read it for
// 100 ms, so tests polling it keep it stale for each other and for
// Health's reads (the check failed so under load, with prepared statements
// missed by a Query-only test).
func waitForLockWait(t *testing.T, db *sql.DB, connID int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE ID = ? AND COMMAND IN ('Query', 'Execute') AND TIME >= 1`, connID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %d never waited for a lock", connID)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// TestKeySequenceConcurrentSameID: two transactions append the same new
// ID of one key at once. The second waits for the first's key counter;
// when the first commits, the second's append fails with an error that
// is Retryable and says why, and the retry appends nothing.
func TestKeySequenceConcurrentSameID(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{KeySequence: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := outbox.Entry{ID: "same", Topic: "t", Key: "k"}
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	if err := b.AppendInTx(ctx, tx1, e); err != nil {
		t.Fatal(err)
	}
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	var conn2 int64
	if err := tx2.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn2); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.AppendInTx(ctx, tx2, e) }()
	waitForLockWait(t, db, conn2)
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if !mysqloutbox.Retryable(err) || !strings.Contains(err.Error(), "concurrent transaction") {
		t.Fatalf("the second append of a new ID: %v; want a Retryable error naming the concurrent append", err)
	}
	tx2.Rollback()
	appendTx(t, b, db, e, outbox.Entry{ID: "next", Topic: "t", Key: "k"})
	rows := readAppended(t, db)
	if len(rows) != 2 || rows[0].headers[outbox.HeaderKeySeq] != "1" || rows[1].headers[outbox.HeaderKeySeq] != "2" {
		t.Fatalf("rows %+v; want same = 1, next = 2", rows)
	}
}

// TestKeySequenceWaiterIsDueAfterHolder: B appends a key while A's append
// of it is open, so B waits for A's counter row; B's row is inserted (its
// seq and due time taken) after the wait, so A (number 1) comes first.
func TestKeySequenceWaiterIsDueAfterHolder(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{KeySequence: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txA, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback()
	if err := b.AppendInTx(ctx, txA, outbox.Entry{ID: "A", Topic: "t", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	txB, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback()
	var connB int64
	if err := txB.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&connB); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		err := b.AppendInTx(ctx, txB, outbox.Entry{ID: "B", Topic: "t", Key: "k"})
		if err == nil {
			err = txB.Commit()
		}
		done <- err
	}()
	waitForLockWait(t, db, connB)
	time.Sleep(20 * time.Millisecond)
	if err := txA.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var order string
	if err := db.QueryRow("SELECT GROUP_CONCAT(id ORDER BY next_at, seq SEPARATOR ',') FROM outbox").Scan(&order); err != nil {
		t.Fatal(err)
	}
	rows := readAppended(t, db)
	if order != "A,B" || rowIDs(rows) != "A,B" || rows[0].headers[outbox.HeaderKeySeq] != "1" || rows[1].headers[outbox.HeaderKeySeq] != "2" {
		t.Fatalf("due order %s, seq order %s, rows %+v; want A (1) before B (2)", order, rowIDs(rows), rows)
	}
}

// TestAppendExistingAndSealed appends calls whose every ID exists (they
// append nothing and succeed), values the derived rows of the insert
// must keep byte for byte, and appends after a Seal (ErrSealed, even for
// existing IDs), with the driver's default affected rows (a duplicate
// counts 0) and with clientFoundRows=true (a duplicate counts 1).
func TestAppendExistingAndSealed(t *testing.T) {
	t.Parallel()
	for _, foundRows := range []bool{false, true} {
		t.Run(fmt.Sprintf("clientFoundRows=%v", foundRows), func(t *testing.T) {
			t.Parallel()
			b, db := newBackend(t, mysqloutbox.Options{Partitions: 2})
			if foundRows {
				b, db = reopenWith(t, db, "clientFoundRows=true")
			}
			ctx := context.Background()
			appendTx(t, b, db,
				outbox.Entry{ID: "a", Topic: "t", Key: "k", Payload: []byte("first a")},
				outbox.Entry{ID: "b", Topic: "t ", Key: "k\xff ", Payload: []byte("b \x00 ")},
				outbox.Entry{ID: "b ", Topic: "t", Payload: []byte("b with a space")},
			)
			want := "a,b,b "
			for _, es := range [][]outbox.Entry{
				{{ID: "a", Topic: "t", Payload: []byte("second a")}},
				{{ID: "b", Topic: "t"}, {ID: "a", Topic: "t"}, {ID: "b", Topic: "t"}},
				{{ID: "b ", Topic: "t"}, {ID: "a", Topic: "t"}},
			} {
				appendTx(t, b, db, es...)
				if got := rowIDs(readAppended(t, db)); got != want {
					t.Fatalf("stored %q after a call of existing IDs; want %q", got, want)
				}
			}
			appendTx(t, b, db, outbox.Entry{ID: "a", Topic: "t"}, outbox.Entry{ID: "c", Topic: "t"}, outbox.Entry{ID: "b", Topic: "t"})
			rows := readAppended(t, db)
			if got := rowIDs(rows); got != "a,b,b ,c" {
				t.Fatalf("stored %q; want a,b,b ,c", got)
			}
			if string(rows[0].payload) != "first a" || rows[1].topic != "t " || rows[1].key != "k\xff " ||
				string(rows[1].payload) != "b \x00 " || string(rows[2].payload) != "b with a space" {
				t.Fatalf("rows %+v; want the first appends' values, trailing spaces and bytes kept", rows[:3])
			}

			if err := b.Seal(ctx); err != nil {
				t.Fatal(err)
			}
			for _, es := range [][]outbox.Entry{
				{{ID: "d", Topic: "t"}},
				{{ID: "a", Topic: "t"}},
				{{ID: "a", Topic: "t"}, {ID: "e", Topic: "t"}},
			} {
				err := b.InTx(ctx, db, func(tx *sql.Tx) error { return b.AppendInTx(ctx, tx, es...) })
				if !errors.Is(err, outbox.ErrSealed) {
					t.Fatalf("append of %d entries to a sealed outbox: %v; want ErrSealed", len(es), err)
				}
			}
			if got := rowIDs(readAppended(t, db)); got != "a,b,b ,c" {
				t.Fatalf("stored %q after the seal; want a,b,b ,c", got)
			}
			if err := b.Unseal(ctx); err != nil {
				t.Fatal(err)
			}
			appendTx(t, b, db, outbox.Entry{ID: "a", Topic: "t"}, outbox.Entry{ID: "d", Topic: "t", NotBefore: time.Now().Add(time.Hour)})
			appendTx(t, b, db, outbox.Entry{ID: "e ", Topic: "t", Payload: []byte(" ")}) // a single row
			appendTx(t, b, db, outbox.Entry{ID: "e", Topic: "t", NotBefore: time.Now().Add(time.Hour)})
			rows = readAppended(t, db)
			if got := rowIDs(rows); got != "a,b,b ,c,d,e ,e" {
				t.Fatalf("stored %q after Unseal; want a,b,b ,c,d,e ,e", got)
			}
			if d, e := rows[4].delay, rows[6].delay; d < 59*time.Minute || d > 61*time.Minute || e < 59*time.Minute || e > 61*time.Minute ||
				string(rows[5].payload) != " " {
				t.Fatalf("rows %+v; want d and e due in an hour, e  with payload \" \"", rows[4:])
			}
		})
	}
}

// reopenWith opens the database of db again with param added to its DSN,
// and a Backend on it.
func reopenWith(t *testing.T, db *sql.DB, param string) (*mysqloutbox.Backend, *sql.DB) {
	t.Helper()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	dsn := testenv.MySQLDSN(name)
	if strings.Contains(dsn, "?") {
		dsn += "&" + param
	} else {
		dsn += "?" + param
	}
	db2, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db2.Close() })
	b, err := mysqloutbox.New(context.Background(), db2, mysqloutbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, db2
}
