package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/outboxrelay/outbox/inbox"
)

func purgeCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{"Bounded", purgeBounded[Tx]},
		{"OldestFirst", purgeOldestFirst[Tx]},
		{"OnlyBeforeHorizon", purgeOnlyBeforeHorizon[Tx]},
		{"KeysToo", purgeKeysToo[Tx]},
		{"OffsetsKept", purgeOffsetsKept[Tx]},
		{"InvalidLimit", purgeInvalidLimit[Tx]},
		{"SkipsOpenTransactions", purgeSkipsOpen[Tx]},
		{"JanitorAcrossBatches", janitorAcrossBatches[Tx]},
		{"ConcurrentPurgesCountOnce", concurrentPurgesCountOnce[Tx]},
		{"ConcurrentJanitorsCountOnce", concurrentJanitorsCountOnce[Tx]},
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// purgeBounded: each Purge removes at most limit IDs and limit keys.
func purgeBounded[Tx any](t *testing.T, e *env[Tx]) {
	ids, keys := names("old", 5), names("oldkey", 5)
	h := e.generations(generation{ids: ids, keys: keys})
	for _, want := range []int{2, 2, 1, 0} {
		gotIDs, gotKeys := e.purge(h[0], 2)
		if gotIDs != want || gotKeys != want {
			t.Fatalf("Purge(limit 2) of 5 old IDs and 5 old keys, removing 2 at a time: removed %d IDs and %d keys, want %d and %d",
				gotIDs, gotKeys, want, want)
		}
	}
	wantAnswers(t, "Record of the purged IDs", e.probe(ids...), all(len(ids), true))
	if got := e.seqs(keys...); len(got) != 0 {
		t.Fatalf("KeySeqs of the purged keys = %v, want none", got)
	}
}

// purgeOldestFirst: a Purge limited to fewer IDs than are old removes the
// oldest.
func purgeOldestFirst[Tx any](t *testing.T, e *env[Tx]) {
	h := e.generations(generation{ids: []string{"first"}}, generation{ids: []string{"second"}}, generation{ids: []string{"third"}})
	before := h[2]
	for i, want := range [][]bool{{true, false, false}, {true, true, false}, {true, true, true}} {
		if ids, _ := e.purge(before, 1); ids != 1 {
			t.Fatalf("Purge %d (limit 1) removed %d IDs, want 1", i+1, ids)
		}
		wantAnswers(t, fmt.Sprintf("Record(first, second, third) (true: purged) after Purge %d (limit 1) of IDs recorded in that order", i+1),
			e.probe("first", "second", "third"), want)
	}
}

// purgeOnlyBeforeHorizon: records newer than before stay, IDs and keys.
func purgeOnlyBeforeHorizon[Tx any](t *testing.T, e *env[Tx]) {
	h := e.generations(
		generation{ids: []string{"old-1", "old-2"}, keys: []string{"oldkey"}},
		generation{ids: []string{"new-1", "new-2"}, keys: []string{"newkey"}},
	)
	e.write(generation{ids: []string{"newest"}, keys: []string{"newestkey"}})
	if ids, keys := e.purge(h[0], 100); ids != 2 || keys != 1 {
		t.Fatalf("Purge(before the second generation, limit 100) removed %d IDs and %d keys, want the 2 and 1 older", ids, keys)
	}
	wantAnswers(t, "Record(old-1, old-2, new-1, new-2, newest) (true: purged)", e.probe("old-1", "old-2", "new-1", "new-2", "newest"),
		[]bool{true, true, false, false, false})
	if got, want := e.seqs("oldkey", "newkey", "newestkey"), map[string]int64{"newkey": 1, "newestkey": 1}; !maps.Equal(got, want) {
		t.Fatalf("KeySeqs after the purge = %v, want %v", got, want)
	}
	if ids, keys := e.purge(h[0], 100); ids != 0 || keys != 0 {
		t.Fatalf("second Purge(same horizon) removed %d IDs and %d keys, want none", ids, keys)
	}
}

// purgeKeysToo: key numbers last set before the horizon go, on their own
// (no IDs to purge); a key set again after it stays.
func purgeKeysToo[Tx any](t *testing.T, e *env[Tx]) {
	h := e.generations(generation{keys: []string{"a", "b", "c"}})
	e.setSeqs(map[string]int64{"b": 5})
	if ids, keys := e.purge(h[0], 10); ids != 0 || keys != 2 {
		t.Fatalf("Purge of keys a, b, c set long ago, b set again since: removed %d IDs and %d keys, want 0 and 2", ids, keys)
	}
	if got, want := e.seqs("a", "b", "c"), map[string]int64{"b": 5}; !maps.Equal(got, want) {
		t.Fatalf("KeySeqs after the purge = %v, want %v (a key's time is when it was last set)", got, want)
	}
}

func purgeOffsetsKept[Tx any](t *testing.T, e *env[Tx]) {
	e.saveOffsets(inbox.Offset{Group: "g", Topic: "t", Partition: 0, Next: 7})
	e.write(generation{ids: []string{"x"}, keys: []string{"k"}})
	e.purge(time.Now().Add(24*time.Hour), 100)
	if got := e.offsets("g", "t"); got[0] != 7 {
		t.Fatalf("Offsets after a Purge of everything = %v, want 0: 7 (offsets are never purged)", got)
	}
}

func purgeInvalidLimit[Tx any](t *testing.T, e *env[Tx]) {
	e.record("x")
	for _, limit := range []int{0, -1} {
		_, _, err := e.s.Purge(e.ctx(), time.Now().Add(time.Hour), limit)
		if !errors.Is(err, inbox.ErrInvalidArgument) {
			t.Errorf("Purge(limit %d) = %v, want an error wrapping inbox.ErrInvalidArgument", limit, err)
		}
	}
	wantAnswers(t, "Record(x) after the rejected purges", e.probe("x"), []bool{false})
}

// purgeSkipsOpen: a Purge while a transaction holds an uncommitted record
// and a committed key (read through KeySeqs, which guards it) returns
// without waiting for the transaction, and what the transaction commits
// afterwards stays.
func purgeSkipsOpen[Tx any](t *testing.T, e *env[Tx]) {
	e.write(generation{ids: []string{"old"}, keys: []string{"held", "free"}})
	ready, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	txDone := make(chan error, 1)
	go func() {
		txDone <- e.s.InTx(e.ctx(), func(ctx context.Context, tx Tx) error {
			if _, err := e.s.Record(ctx, tx, []string{"open"}); err != nil {
				return err
			}
			if _, err := e.s.KeySeqs(ctx, tx, []string{"held"}); err != nil {
				return err
			}
			if err := e.s.SetKeySeqs(ctx, tx, map[string]int64{"held": 2}); err != nil {
				return err
			}
			close(ready)
			<-release
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-txDone:
		t.Fatalf("the transaction holding a record failed: %v", err)
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), 20*time.Second)
	defer cancel()
	_, _, err := e.s.Purge(ctx, time.Now().Add(time.Hour), 100)
	unblock()
	if err != nil {
		t.Fatalf("Purge while a transaction holds a new record and a key = %v, want nil: Purge must skip what another transaction holds, not wait for it", err)
	}
	if err := <-txDone; err != nil && !e.s.Retryable(err) {
		t.Fatalf("the transaction holding the record = %v, want nil (or a retryable conflict)", err)
	} else if err != nil {
		return // a store that cannot wait failed the open transaction instead: nothing of it to check
	}
	wantAnswers(t, "Record(open, old) after the open transaction committed (false: kept)", e.probe("open", "old"), []bool{false, true})
	if got := e.seqs("held", "free"); got["held"] != 2 || len(got) != 1 {
		t.Fatalf("KeySeqs(held, free) = %v, want held: 2 as the open transaction set it, free purged", got)
	}
}

// janitorAcrossBatches: inbox.PurgeOnce removes every old record in
// batches of BatchSize and keeps the new ones.
func janitorAcrossBatches[Tx any](t *testing.T, e *env[Tx]) {
	oldIDs, oldKeys := names("old", 25), names("oldkey", 23)
	h := e.generations(generation{ids: oldIDs, keys: oldKeys})
	e.write(generation{ids: []string{"new"}, keys: []string{"newkey"}})
	ids, keys, err := inbox.PurgeOnce(e.ctx(), e.s, inbox.JanitorOptions{
		Retention: time.Since(h[0]), BatchSize: 10, Pause: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), MeterProvider: noop.NewMeterProvider(),
	})
	if err != nil || ids != 25 || keys != 23 {
		t.Fatalf("PurgeOnce(BatchSize 10) of 25 old IDs and 23 old keys = %d IDs, %d keys, %v; want 25, 23, nil", ids, keys, err)
	}
	wantAnswers(t, "Record of the old IDs and new", e.probe(append(oldIDs, "new")...), append(all(len(oldIDs), true), false))
	if got := e.seqs(append(oldKeys, "newkey")...); len(got) != 1 || got["newkey"] != 1 {
		t.Fatalf("KeySeqs of the old keys and newkey = %v, want only newkey: 1", got)
	}
}

// concurrentPurgesCountOnce: janitors in several processes purge at once:
// together they remove every old record, and count each once (a record
// another Purge removed first is not counted again). A Purge failing with
// a retryable conflict is tried again.
func concurrentPurgesCountOnce[Tx any](t *testing.T, e *env[Tx]) {
	const nIDs, nKeys, janitors = 60, 40, 4
	e.write(generation{ids: names("old", nIDs), keys: names("oldkey", nKeys)})
	before := time.Now().Add(time.Hour)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		ids, keys int
		errs      []error
		begin     = make(chan struct{})
		ctx       = e.ctx()
	)
	for range janitors {
		wg.Go(func() {
			<-begin
			for {
				i, k, err := e.s.Purge(ctx, before, 3)
				mu.Lock()
				ids, keys = ids+i, keys+k
				if err != nil && !e.s.Retryable(err) {
					errs = append(errs, err)
				}
				stop := len(errs) > 0 || (err == nil && i == 0 && k == 0)
				mu.Unlock()
				if stop {
					return
				}
			}
		})
	}
	close(begin)
	watchdog(t, &wg, fmt.Sprintf("%d concurrent purges", janitors))
	if len(errs) > 0 {
		t.Fatalf("concurrent Purge errors: %v", errs)
	}
	if ids != nIDs || keys != nKeys {
		t.Fatalf("%d Purges at once, each until it removed nothing, counted %d IDs and %d keys removed; want %d and %d", janitors, ids, keys, nIDs, nKeys)
	}
	if i, k := e.purge(before, 100); i != 0 || k != 0 {
		t.Fatalf("a Purge after them removed %d IDs and %d keys, want none", i, k)
	}
}

// concurrentJanitorsCountOnce: two janitors (inbox.PurgeOnce, small
// batches) over one store at once, as two consumers of a fleet each
// running one: together they remove every old record, each counted once,
// and neither stops while old records are left (a janitor ends its round
// only at a batch short of its limit, which it sees only once the other
// holds or took the rest). A round failing with a retryable conflict is
// run again, as RunJanitor does at its next interval.
func concurrentJanitorsCountOnce[Tx any](t *testing.T, e *env[Tx]) {
	const nIDs, nKeys, janitors = 60, 40, 2
	h := e.generations(generation{ids: names("old", nIDs), keys: names("oldkey", nKeys)})
	e.write(generation{ids: []string{"new"}, keys: []string{"newkey"}})
	retention := time.Since(h[0])
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		ids, keys int
		errs      []error
		begin     = make(chan struct{})
		ctx       = e.ctx()
	)
	for range janitors {
		wg.Go(func() {
			<-begin
			for {
				i, k, err := inbox.PurgeOnce(ctx, e.s, inbox.JanitorOptions{
					Retention: retention, BatchSize: 4, Pause: time.Millisecond,
					Logger: slog.New(slog.DiscardHandler), MeterProvider: noop.NewMeterProvider(),
				})
				mu.Lock()
				ids, keys = ids+i, keys+k
				retry := err != nil && e.s.Retryable(err)
				if err != nil && !retry {
					errs = append(errs, err)
				}
				mu.Unlock()
				if !retry {
					return
				}
			}
		})
	}
	close(begin)
	watchdog(t, &wg, fmt.Sprintf("%d concurrent janitors", janitors))
	if len(errs) > 0 {
		t.Fatalf("concurrent PurgeOnce errors: %v", errs)
	}
	if ids != nIDs || keys != nKeys {
		t.Fatalf("%d janitors at once counted %d IDs and %d keys removed; want %d and %d, each once", janitors, ids, keys, nIDs, nKeys)
	}
	if i, k := e.purge(h[0], 1000); i != 0 || k != 0 {
		t.Fatalf("a Purge after the janitors returned removed %d IDs and %d keys, want none: a janitor stopped while old records were left", i, k)
	}
	wantAnswers(t, "Record(new) after the janitors (false: kept)", e.probe("new"), []bool{false})
}
