package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	"github.com/outboxrelay/outbox/conformance"
	"github.com/outboxrelay/outbox/internal/keyseqtest"
)

// appendTx appends entries in a transaction of their own and commits it
// (or rolls it back when rollback is set).
func appendTx(ctx context.Context, t testing.TB, p *pgxpool.Pool, b *pgoutbox.Backend, rollback bool, es ...outbox.Entry) {
	t.Helper()
	tx, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, b.AppendInTx(ctx, tx, es...))
	if !rollback {
		require.NoError(t, tx.Commit(ctx))
	}
}

// drainAll fetches and marks sent every entry of partition 0, in fetch
// order.
func drainAll(ctx context.Context, t testing.TB, b *pgoutbox.Backend) []outbox.Entry {
	t.Helper()
	l, err := b.AcquireLease(ctx, 0, "keyseq", time.Minute)
	require.NoError(t, err)
	var all []outbox.Entry
	for {
		got, err := b.FindPendingBatch(ctx, l, 100)
		require.NoError(t, err)
		if len(got) == 0 {
			return all
		}
		ids := make([]string, len(got))
		for i, e := range got {
			ids[i] = e.ID
		}
		require.NoError(t, b.MarkSent(ctx, l, ids))
		all = append(all, got...)
	}
}

// seqs returns each entry's key sequence header ("" when it has none) by ID.
func seqs(es []outbox.Entry) map[string]string {
	m := map[string]string{}
	for _, e := range es {
		m[e.ID] = e.Headers[outbox.HeaderKeySeq]
	}
	return m
}

func TestKeySequence(t *testing.T) {
	t.Parallel()

	t.Run("NumbersEachKeyFromOne", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, time.Minute)
		b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: true, NoNotify: true})
		appendTx(ctx, t, p, b, false, outbox.Entry{ID: "a1", Topic: "t", Key: "a", Headers: map[string]string{"h": "v"}})
		appendTx(ctx, t, p, b, false,
			outbox.Entry{ID: "b1", Topic: "t", Key: "b"},
			outbox.Entry{ID: "a2", Topic: "t", Key: "a"},
			outbox.Entry{ID: "n1", Topic: "t"},
			outbox.Entry{ID: "b2", Topic: "t", Key: "b", Headers: map[string]string{"z": "last"}},
			outbox.Entry{ID: "a3", Topic: "t", Key: "a"})
		appendTx(ctx, t, p, b, false, outbox.Entry{ID: "a4", Topic: "t", Key: "a"}, outbox.Entry{ID: "n2", Topic: "t"})

		info, err := b.Lookup(ctx, "a3")
		require.NoError(t, err)
		require.Equal(t, "3", info.Headers[outbox.HeaderKeySeq], "Lookup shows the header")

		got := drainAll(ctx, t, b)
		require.Equal(t, map[string]string{"a1": "1", "a2": "2", "a3": "3", "a4": "4", "b1": "1", "b2": "2", "n1": "", "n2": ""}, seqs(got))
		for _, e := range got {
			switch e.ID {
			case "a1":
				require.Equal(t, map[string]string{"h": "v", outbox.HeaderKeySeq: "1"}, e.Headers, "the caller's headers are kept")
			case "b2":
				require.Equal(t, map[string]string{"z": "last", outbox.HeaderKeySeq: "2"}, e.Headers)
			case "n1", "n2":
				require.Nil(t, e.Headers, "an entry without a key gets no number")
			}
			n, ok := e.KeySeq()
			require.Equal(t, e.Key != "", ok)
			if ok {
				require.Equal(t, e.Headers[outbox.HeaderKeySeq], strconv.FormatInt(n, 10))
			}
		}
		// Sent entries are deleted; the key goes on counting.
		appendTx(ctx, t, p, b, false, outbox.Entry{ID: "a5", Topic: "t", Key: "a"})
		require.Equal(t, map[string]string{"a5": "5"}, seqs(drainAll(ctx, t, b)))
	})

	t.Run("RollbackLeavesNoGap", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, time.Minute)
		b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: true, NoNotify: true})
		appendTx(ctx, t, p, b, false, outbox.Entry{ID: "x1", Topic: "t", Key: "k"})
		appendTx(ctx, t, p, b, true, outbox.Entry{ID: "gone1", Topic: "t", Key: "k"}, outbox.Entry{ID: "gone2", Topic: "t", Key: "new"})
		appendTx(ctx, t, p, b, false, outbox.Entry{ID: "x2", Topic: "t", Key: "k"}, outbox.Entry{ID: "y1", Topic: "t", Key: "new"})
		require.Equal(t, map[string]string{"x1": "1", "x2": "2", "y1": "1"}, seqs(drainAll(ctx, t, b)))
	})

	t.Run("IdempotentReappendTakesNoNumber", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, time.Minute)
		b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: true, NoNotify: true})
		appendTx(ctx, t, p, b, false, outbox.Entry{ID: "e1", Topic: "t", Key: "k"})
		// Again in a later transaction, twice in one call, and again in a
		// second call of the same transaction.
		tx, err := p.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, b.AppendInTx(ctx, tx,
			outbox.Entry{ID: "e1", Topic: "t", Key: "k"},
			outbox.Entry{ID: "e2", Topic: "t", Key: "k"},
			outbox.Entry{ID: "e2", Topic: "t", Key: "k"},
			outbox.Entry{ID: "e3", Topic: "t", Key: "k"}))
		require.NoError(t, b.AppendInTx(ctx, tx, outbox.Entry{ID: "e3", Topic: "t", Key: "k"}, outbox.Entry{ID: "e4", Topic: "t", Key: "k"}))
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, map[string]string{"e1": "1", "e2": "2", "e3": "3", "e4": "4"}, seqs(drainAll(ctx, t, b)))
	})

	t.Run("CallerSetHeaderIsRefused", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, time.Minute)
		b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: true, NoNotify: true})
		tx, err := p.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		err = b.AppendInTx(ctx, tx, outbox.Entry{ID: "ok", Topic: "t", Key: "k"},
			outbox.Entry{ID: "forged", Topic: "t", Key: "k", Headers: map[string]string{outbox.HeaderKeySeq: "7"}})
		require.ErrorIs(t, err, outbox.ErrInvalidEntry)
		require.ErrorContains(t, err, "forged")
		require.ErrorContains(t, err, outbox.HeaderKeySeq)
	})

	t.Run("OffLeavesHeadersAlone", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, time.Minute)
		b, p := newBackend(t, extended, pgoutbox.Options{NoNotify: true})
		appendTx(ctx, t, p, b, false, outbox.Entry{ID: "a", Topic: "t", Key: "k", Headers: map[string]string{outbox.HeaderKeySeq: "caller's", "h": "v"}},
			outbox.Entry{ID: "b", Topic: "t", Key: "k"})
		got := drainAll(ctx, t, b)
		require.Len(t, got, 2)
		require.Equal(t, map[string]string{outbox.HeaderKeySeq: "caller's", "h": "v"}, got[0].Headers)
		require.Nil(t, got[1].Headers)
		var n int
		require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.Options().Schema, "outbox_keyseq"}.Sanitize()).Scan(&n))
		require.Zero(t, n, "the counter table is not touched")
	})

	t.Run("RequeueAndRetryKeepTheNumber", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, time.Minute)
		b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: true, NoNotify: true, Archive: true})
		appendTx(ctx, t, p, b, false, outbox.Entry{ID: "r1", Topic: "t", Key: "k"}, outbox.Entry{ID: "r2", Topic: "t", Key: "k"})
		l, err := b.AcquireLease(ctx, 0, "keyseq", time.Minute)
		require.NoError(t, err)
		got, err := b.FindPendingBatch(ctx, l, 10)
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "r1", Error: "boom", Delay: -time.Second}, {ID: "r2", Error: "boom", Park: true}}))
		require.NoError(t, b.Release(ctx, l, nil))
		n, err := b.Requeue(ctx, "r2")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, map[string]string{"r1": "1", "r2": "2"}, seqs(drainAll(ctx, t, b)))
		// The archive keeps the header of what was sent.
		var raw []byte
		require.NoError(t, p.QueryRow(ctx, "SELECT headers FROM "+pgx.Identifier{b.Options().Schema, "outbox_archive"}.Sanitize()+" WHERE id = 'r2'").Scan(&raw))
		h, err := pgoutbox.DecodeHeaders(raw)
		require.NoError(t, err)
		require.Equal(t, "2", h[outbox.HeaderKeySeq])
	})

	t.Run("SQLTxToo", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, time.Minute)
		b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: true})
		db := stdlib.OpenDBFromPool(p)
		defer db.Close()
		for i, rollback := range []bool{false, true, false} {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, b.AppendInSQLTx(ctx, tx, outbox.Entry{ID: fmt.Sprint("s", i), Topic: "t", Key: "k"}, outbox.Entry{ID: fmt.Sprint("s", i), Topic: "t", Key: "k"}))
			if rollback {
				require.NoError(t, tx.Rollback())
			} else {
				require.NoError(t, tx.Commit())
			}
		}
		require.Equal(t, map[string]string{"s0": "1", "s2": "2"}, seqs(drainAll(ctx, t, b)))
	})

	t.Run("NewWithoutMigration005Fails", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, time.Minute)
		p := pool(t, extended)
		opts := pgoutbox.Options{Schema: freshSchema(t, p), Partitions: 1, KeySequence: true}
		require.NoError(t, pgoutbox.MigrateTo(ctx, p, opts, 4))
		_, err := pgoutbox.New(ctx, p, opts)
		require.ErrorContains(t, err, "migration 005")
		require.ErrorContains(t, err, "pgoutbox.Migrate")
		require.NoError(t, pgoutbox.Migrate(ctx, p, opts))
		b, err := pgoutbox.New(ctx, p, opts)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	})
}

// TestKeySequenceConcurrentAppenders appends one hot key (and a few cold
// ones) from many transactions at once, a third of them rolled back:
// every committed entry of a key carries a distinct number, together
// exactly 1..N, and the relay fetches them in number order.
func TestKeySequenceConcurrentAppenders(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: true})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const workers, perWorker = 8, 25
	var mu sync.Mutex
	committed := map[string]string{} // ID -> key
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range perWorker {
				key := "hot"
				if r.IntN(4) == 0 {
					key = fmt.Sprint("cold-", r.IntN(3))
				}
				es := []outbox.Entry{{ID: fmt.Sprintf("w%d-%d-a", w, i), Topic: "t", Key: key}}
				if r.IntN(2) == 0 { // two of the key in one call, and a keyless one
					es = append(es, outbox.Entry{ID: fmt.Sprintf("w%d-%d-b", w, i), Topic: "t", Key: key}, outbox.Entry{ID: fmt.Sprintf("w%d-%d-n", w, i), Topic: "t"})
				}
				rollback := r.IntN(3) == 0
				err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					if err := b.AppendInTx(ctx, tx, es...); err != nil {
						return err
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				if rollback && errors.Is(err, errRollback) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range es {
					committed[e.ID] = e.Key
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got := drainAll(ctx, t, b)
	require.Len(t, got, len(committed))
	byKey := map[string][]int64{}
	for _, e := range got {
		require.Equal(t, committed[e.ID], e.Key)
		n, ok := e.KeySeq()
		if e.Key == "" {
			require.False(t, ok)
			continue
		}
		require.True(t, ok, "entry %s has no number", e.ID)
		byKey[e.Key] = append(byKey[e.Key], n)
	}
	for k, ns := range byKey {
		require.True(t, slices.IsSorted(ns), "key %s fetched out of number order: %v", k, ns)
		for i, n := range ns {
			require.Equal(t, int64(i+1), n, "key %s: numbers %v are not 1..%d", k, ns, len(ns))
		}
	}
	t.Logf("numbers per key: %v", func() map[string]int {
		m := map[string]int{}
		for k, ns := range byKey {
			m[k] = len(ns)
		}
		return m
	}())
	require.Contains(t, slices.Collect(maps.Keys(byKey)), "hot")
}

// waitForAnyLock returns once the backend pid waits on a lock of any kind
// (a row's, or a transaction's).
func waitForAnyLock(ctx context.Context, t *testing.T, p *pgxpool.Pool, pid uint32) {
	t.Helper()
	for {
		var waiting bool
		err := p.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`, int32(pid)).Scan(&waiting)
		require.NoError(t, err, "waiting for the second append to block")
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testCtx returns a context cancelled after d or when t ends.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var errRollback = errors.New("rollback on purpose")

// TestKeySequenceConcurrentSameID: two transactions append the same new
// ID of one key at once. The second waits for the first's key counter;
// when the first commits, the second's append fails with a unique
// violation that says to retry (skipping the row would leave the number
// it took unused), and the retry appends nothing.
func TestKeySequenceConcurrentSameID(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: true, NoNotify: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := outbox.Entry{ID: "same", Topic: "t", Key: "k"}
	tx1, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx1.Rollback(ctx) }()
	require.NoError(t, b.AppendInTx(ctx, tx1, e))

	tx2, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx2.Rollback(ctx) }()
	pid2 := tx2.Conn().PgConn().PID()
	done := make(chan error, 1)
	go func() { done <- b.AppendInTx(ctx, tx2, e) }()
	waitForAnyLock(ctx, t, p, pid2)
	require.NoError(t, tx1.Commit(ctx))
	err = <-done
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.ErrorContains(t, err, "retry the transaction")
	_ = tx2.Rollback(ctx)

	appendTx(ctx, t, p, b, false, e, outbox.Entry{ID: "next", Topic: "t", Key: "k"})
	require.Equal(t, map[string]string{"same": "1", "next": "2"}, seqs(drainAll(ctx, t, b)))
}

// TestKeySequenceWaiterIsDueAfterHolder: B appends a key while A's append
// of it is open, so B waits for A's counter row. B's clock reading (its
// due time) is taken after the wait, so although B started its statement
// first in time order of clocks, A (number 1) is fetched before B (2).
func TestKeySequenceWaiterIsDueAfterHolder(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: true, NoNotify: true})
	ctx := testCtx(t, 30*time.Second)
	txA, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = txA.Rollback(ctx) }()
	require.NoError(t, b.AppendInTx(ctx, txA, outbox.Entry{ID: "A", Topic: "t", Key: "k"}))
	txB, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = txB.Rollback(ctx) }()
	done := make(chan error, 1)
	go func() {
		err := b.AppendInTx(ctx, txB, outbox.Entry{ID: "B", Topic: "t", Key: "k"})
		if err == nil {
			err = txB.Commit(ctx)
		}
		done <- err
	}()
	waitForAnyLock(ctx, t, p, txB.Conn().PgConn().PID())
	time.Sleep(20 * time.Millisecond) // B's statement started well before A commits
	require.NoError(t, txA.Commit(ctx))
	require.NoError(t, <-done)
	got := drainAll(ctx, t, b)
	require.Len(t, got, 2)
	require.Equal(t, []string{"A", "B"}, []string{got[0].ID, got[1].ID})
	require.Equal(t, map[string]string{"A": "1", "B": "2"}, seqs(got))
}

// keySeqStripped is a Backend with Options.KeySequence whose reads check
// and then drop the key sequence header, so that the conformance suite,
// which compares the headers it gets back with those it appended, runs
// with the option on: the option must change nothing but that header.
type keySeqStripped struct{ *pgoutbox.Backend }

// stripKeySeq checks and removes the key sequence header (see
// keyseqtest.Strip).
func stripKeySeq(es []outbox.Entry) error { return keyseqtest.Strip(es, false) }

func (b keySeqStripped) FindPendingBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.Entry, error) {
	es, err := b.Backend.FindPendingBatch(ctx, l, limit)
	if err == nil {
		err = stripKeySeq(es)
	}
	return es, err
}

func (b keySeqStripped) FetchBatch(ctx context.Context, l outbox.Lease, limit int) (outbox.Batch, error) {
	batch, err := b.Backend.FetchBatch(ctx, l, limit)
	if err == nil {
		err = stripKeySeq(batch.Entries)
	}
	return batch, err
}

func (b keySeqStripped) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	es, err := b.Backend.Parked(ctx, after, limit)
	if err == nil {
		err = stripKeySeq(es)
	}
	return es, err
}

func (b keySeqStripped) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	info, err := b.Backend.Lookup(ctx, id)
	if err == nil {
		es := []outbox.Entry{info.Entry}
		err = stripKeySeq(es)
		info.Entry = es[0]
	}
	return info, err
}

// Entries checks and drops the header as the reads above do.
func (b keySeqStripped) Entries(ctx context.Context, state outbox.EntryState, f outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	infos, err := b.Backend.Entries(ctx, state, f, after, limit)
	if err == nil {
		err = keyseqtest.StripInfos(infos, stripKeySeq)
	}
	return infos, err
}

// BlockedKeys checks and drops the header of each head entry.
func (b keySeqStripped) BlockedKeys(ctx context.Context, f outbox.ListFilter, after outbox.BlockedKey, limit int) ([]outbox.BlockedKey, error) {
	keys, err := b.Backend.BlockedKeys(ctx, f, after, limit)
	if err == nil {
		err = keyseqtest.StripBlocked(keys, stripKeySeq)
	}
	return keys, err
}

// ExportBatch checks and drops the header as the reads above do.
func (b keySeqStripped) ExportBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	infos, err := b.Backend.ExportBatch(ctx, l, limit)
	if err == nil {
		err = keyseqtest.StripInfos(infos, stripKeySeq)
	}
	return infos, err
}

// Import gives each keyed entry without one the key sequence header an
// entry exported from a numbering outbox carries (Import keeps headers as
// they were and numbers nothing), so the reads above find it.
func (b keySeqStripped) Import(ctx context.Context, infos []outbox.EntryInfo) (int, error) {
	return b.Backend.Import(ctx, keyseqtest.NumberImports(infos))
}

type keySeqHarness struct{ harness }

func (h keySeqHarness) Backend() outbox.Backend[pgx.Tx] { return keySeqStripped{h.b} }

func (h keySeqHarness) Reopen(ctx context.Context, partitions int) (outbox.Store, error) {
	s, err := h.harness.Reopen(ctx, partitions)
	if err != nil {
		return nil, err
	}
	return keySeqStripped{s.(*pgoutbox.Backend)}, nil
}

// TestConformanceKeySequence runs the conformance suite with
// Options.KeySequence on (the header checked and dropped on reads).
func TestConformanceKeySequence(t *testing.T) {
	t.Parallel()
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[pgx.Tx] {
		o := pgoutbox.Options{KeySequence: true, Partitions: cfg.Partitions, Archive: cfg.Archive}
		b, p := newBackend(t, extended, o)
		o.Schema = b.Options().Schema
		return keySeqHarness{harness{b: b, pool: p, opts: o}}
	})
}

// TestConformanceKeySequencePgBouncer runs the conformance suite with
// Options.KeySequence on and the backend's pool behind PgBouncer in
// transaction pooling mode (simple protocol; migrations and LISTEN go to
// PostgreSQL directly): the counters live in the caller's transaction, so
// transaction pooling changes nothing.
func TestConformanceKeySequencePgBouncer(t *testing.T) {
	t.Parallel()
	through := bouncerPool(t, "simple_protocol")
	direct := pool(t, pgx.QueryExecModeSimpleProtocol)
	listen := direct.Config().ConnConfig.Copy()
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[pgx.Tx] {
		ctx := testCtx(t, 20*time.Second)
		o := pgoutbox.Options{Schema: freshSchema(t, direct), Partitions: cfg.Partitions, ListenConfig: listen, KeySequence: true, Archive: cfg.Archive}
		mo := o
		mo.Partitions = max(cfg.Partitions, 1)
		if err := pgoutbox.Migrate(ctx, direct, mo); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		b, err := pgoutbox.New(ctx, through, o)
		if err != nil {
			t.Fatalf("New through PgBouncer: %v", err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return keySeqHarness{harness{b: b, pool: through, opts: o}}
	})
}
