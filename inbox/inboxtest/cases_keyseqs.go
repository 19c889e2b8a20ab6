package inboxtest

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/inbox"
)

func keySeqCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{"RoundTrip", keySeqsRoundTrip[Tx]},
		{"AbsentKeysAbsent", absentKeysAbsent[Tx]},
		{"KeysComparedExactly", keysComparedExactly[Tx]},
		{"ConcurrentUpdatesSerialize", concurrentUpdatesSerialize[Tx]},
		{"AbsentKeyGuarded", absentKeyGuarded[Tx]},
		{"ConcurrentHandlersOfOneKey", concurrentHandlersOfOneKey[Tx]},
	}
}

func keySeqsRoundTrip[Tx any](t *testing.T, e *env[Tx]) {
	e.setSeqs(map[string]int64{"a": 3, "b": 7, "big": math.MaxInt64})
	want := map[string]int64{"a": 3, "b": 7, "big": math.MaxInt64}
	if got := e.seqs("a", "b", "big"); !maps.Equal(got, want) {
		t.Fatalf("KeySeqs(a, b, big) = %v, want %v", got, want)
	}
	e.setSeqs(map[string]int64{"a": 2, "c": 1})
	e.setSeqs(nil)
	e.setSeqs(map[string]int64{})
	want = map[string]int64{"a": 2, "b": 7, "c": 1}
	if got := e.seqs("c", "b", "a"); !maps.Equal(got, want) {
		t.Fatalf("KeySeqs(c, b, a) after setting a to 2 (lower: SetKeySeqs overwrites) and c to 1 = %v, want %v", got, want)
	}
	// Written and read back in the same transaction.
	e.commit("SetKeySeqs then KeySeqs", func(ctx context.Context, tx Tx) error {
		if err := e.s.SetKeySeqs(ctx, tx, map[string]int64{"a": 9}); err != nil {
			return err
		}
		got, err := e.s.KeySeqs(ctx, tx, []string{"a"})
		if err == nil && got["a"] != 9 && got["a"] != 2 {
			t.Errorf("KeySeqs(a) in the transaction that set it to 9 = %v, want 9 (or the committed 2)", got)
		}
		return err
	})
	if got := e.seqs("a"); got["a"] != 9 {
		t.Fatalf("KeySeqs(a) after a committed SetKeySeqs(a: 9) = %v, want 9", got)
	}
}

func absentKeysAbsent[Tx any](t *testing.T, e *env[Tx]) {
	e.setSeqs(map[string]int64{"here": 1})
	got := e.seqs("here", "never")
	if len(got) != 1 || got["here"] != 1 {
		t.Fatalf("KeySeqs(here, never) = %v, want only here: 1 (absent keys are absent from the map, not 0)", got)
	}
	e.commit("KeySeqs(no keys)", func(ctx context.Context, tx Tx) error {
		got, err := e.s.KeySeqs(ctx, tx, nil)
		if err == nil && len(got) != 0 {
			t.Errorf("KeySeqs(nil) = %v, want an empty map", got)
		}
		return err
	})
}

func keysComparedExactly[Tx any](t *testing.T, e *env[Tx]) {
	long := strings.Repeat("k", 199)
	seqs := map[string]int64{"k": 1, "K": 2, "k ": 3, "caf\u00e9": 4, "cafe\u0301": 5, long + "1": 6, long + "2": 7}
	e.setSeqs(seqs)
	keys := append(mapsKeys(seqs), "K ", "CAF\u00c9", long+"3")
	if got := e.seqs(keys...); !maps.Equal(got, seqs) {
		t.Fatalf("KeySeqs of keys that differ only in case, spaces, Unicode or past a prefix = %v, want %v", got, seqs)
	}
}

func mapsKeys(m map[string]int64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// keyReader reads and guards key's number in tx: KeySeqs, or an optional
// interface's method that does what KeySeqs does.
type keyReader[Tx any] func(ctx context.Context, tx Tx, key string) (map[string]int64, error)

func (e *env[Tx]) keySeqsReader(ctx context.Context, tx Tx, key string) (map[string]int64, error) {
	return e.s.KeySeqs(ctx, tx, []string{key})
}

// increment adds 1 to key's number (absent counts as 0) in one
// transaction, running it again while the store says a conflict is
// retryable.
func (e *env[Tx]) increment(ctx context.Context, key string, read keyReader[Tx]) error {
	for attempt := 1; ; attempt++ {
		err := e.s.InTx(ctx, func(ctx context.Context, tx Tx) error {
			got, err := read(ctx, tx, key)
			if err != nil {
				return err
			}
			return e.s.SetKeySeqs(ctx, tx, map[string]int64{key: got[key] + 1})
		})
		if err == nil || !e.s.Retryable(err) || attempt == 1000 {
			return err
		}
		time.Sleep(time.Duration(rand.N(2000)) * time.Microsecond)
	}
}

// incrementConcurrently increments each of keys n times from two
// goroutines at once (started together for each increment, so that their
// transactions overlap) and checks that every key ends at its start plus
// 2n: a transaction that read a key's number is not overtaken by another
// setting it.
func (e *env[Tx]) incrementConcurrently(keys []string, n int, start map[string]int64, read keyReader[Tx]) {
	e.t.Helper()
	ctx := e.ctx()
	for range n {
		for _, k := range keys {
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			begin := make(chan struct{})
			for range 2 {
				wg.Go(func() {
					<-begin
					if err := e.increment(ctx, k, read); err != nil {
						errs <- err
					}
				})
			}
			close(begin)
			watchdog(e.t, &wg, "two goroutines updating the same key")
			close(errs)
			for err := range errs {
				e.t.Fatalf("increment(%s): %v", k, err)
			}
		}
	}
	got := e.seqs(keys...)
	for _, k := range keys {
		if got[k] != start[k]+int64(2*n) {
			e.t.Errorf("key %q after %d increments from each of two goroutines, each reading the number with KeySeqs and setting it +1 in one transaction: %d, want %d (an update was lost: KeySeqs does not guard the key for its transaction)",
				k, n, got[k], start[k]+int64(2*n))
		}
	}
}

// concurrentUpdatesSerialize: two goroutines read and set one committed
// key, many times: no update is lost.
func concurrentUpdatesSerialize[Tx any](t *testing.T, e *env[Tx]) {
	e.setSeqs(map[string]int64{"hot": 100})
	e.incrementConcurrently([]string{"hot"}, 25, map[string]int64{"hot": 100}, e.keySeqsReader)
}

// absentKeyGuarded: the same for keys that are absent when the two
// transactions read them (KeySeqs guards a key it did not find).
func absentKeyGuarded[Tx any](t *testing.T, e *env[Tx]) {
	var keys []string
	for i := range 25 {
		keys = append(keys, fmt.Sprintf("new-%d", i))
	}
	e.incrementConcurrently(keys, 1, nil, e.keySeqsReader)
}

// concurrentHandlersOfOneKey: two goroutines handle messages of one key
// with the same numbers 2..n+1 through Inbox.Handle (different IDs), both
// starting each number together: each number is applied in order once
// and late once, without gaps, and the key ends at n+1.
func concurrentHandlersOfOneKey[Tx any](t *testing.T, e *env[Tx]) {
	const n = 20
	e.setSeqs(map[string]int64{"k": 1})
	ib := e.inbox(inbox.Options{})
	ctx := e.ctx()
	var (
		mu                sync.Mutex
		inOrder, late     int
		gaps, errs, first []string
	)
	for seq := int64(2); seq <= n+1; seq++ {
		var wg sync.WaitGroup
		begin := make(chan struct{})
		for _, side := range []string{"A", "B"} {
			wg.Go(func() {
				<-begin
				m := inbox.Message{ID: fmt.Sprintf("%s-%d", side, seq), Key: "k", Seq: seq}
				r, err := ib.Handle(ctx, m, func(context.Context, Tx, inbox.Message) error { return nil })
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err.Error())
				case r.Gap != nil:
					gaps = append(gaps, fmt.Sprintf("%s: %+v", m.ID, *r.Gap))
				case r.First:
					first = append(first, m.ID)
				case r.Late:
					late++
				default:
					inOrder++
				}
			})
		}
		close(begin)
		watchdog(t, &wg, "two goroutines handling one key")
	}
	if len(errs) > 0 {
		t.Fatalf("Handle errors: %v", errs)
	}
	if inOrder != n || late != n || len(gaps) > 0 || len(first) > 0 {
		t.Errorf("two goroutines handling numbers 2..%d of one key at once: %d in order, %d late, gaps %v, first %v; want %d in order, %d late, no gap (a handler read a number another transaction was changing)",
			n+1, inOrder, late, gaps, first, n, n)
	}
	if got := e.seqs("k"); got["k"] != n+1 {
		t.Errorf("KeySeqs(k) = %v, want %d", got, n+1)
	}
}
