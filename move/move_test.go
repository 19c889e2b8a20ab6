package move_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/move"
)

// seeded is a source outbox with entries in every state.
type seeded struct {
	src  *memory.Backend
	want map[string]outbox.EntryInfo // by ID, as Lookup reports them before the move
}

// seed appends n keys × 3 entries to a 4-partition source and then puts
// some in each state: key k0's first entry retrying (attempt 1, error,
// due in an hour), k1's first parked, k2's scheduled an hour ahead; the
// rest due.
func seed(t *testing.T, n int) seeded {
	t.Helper()
	ctx := context.Background()
	src := memory.New(memory.Options{Partitions: 4})
	var entries []outbox.Entry
	for k := range n {
		for i := range 3 {
			e := outbox.Entry{ID: fmt.Sprintf("k%d-%d", k, i), Topic: "orders", Key: fmt.Sprintf("k%d", k),
				Payload: []byte(fmt.Sprintf("payload %d/%d", k, i)), Headers: map[string]string{"h": fmt.Sprint(i)}}
			if k == 2 && i == 0 {
				e.NotBefore = time.Now().Add(time.Hour).Truncate(time.Millisecond)
			}
			entries = append(entries, e)
		}
	}
	if err := src.Append(ctx, entries...); err != nil {
		t.Fatal(err)
	}
	fail := map[string]outbox.Failure{
		"k0-0": {ID: "k0-0", Error: "broker down", Delay: time.Hour},
		"k1-0": {ID: "k1-0", Error: "too large", Park: true},
	}
	for p := range src.Partitions() {
		l, err := src.AcquireLease(ctx, p, "seeder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := src.FindPendingBatch(ctx, l, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var fs []outbox.Failure
		var rest []string
		for _, e := range batch {
			if f, ok := fail[e.ID]; ok {
				fs = append(fs, f)
			} else {
				rest = append(rest, e.ID)
			}
		}
		if err := src.MarkFailed(ctx, l, fs); err != nil {
			t.Fatal(err)
		}
		if err := src.Release(ctx, l, rest); err != nil {
			t.Fatal(err)
		}
		if err := src.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]outbox.EntryInfo{}
	for _, e := range entries {
		info, err := src.Lookup(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		want[e.ID] = info
	}
	return seeded{src: src, want: want}
}

// checkMoved checks that dst holds every entry of want as it was, in the
// partition its key maps to there.
func checkMoved(t *testing.T, dst *memory.Backend, want map[string]outbox.EntryInfo) {
	t.Helper()
	ctx := context.Background()
	for id, w := range want {
		got, err := dst.Lookup(ctx, id)
		if err != nil {
			t.Fatalf("Lookup(%s) in the destination: %v", id, err)
		}
		if got.Topic != w.Topic || got.Key != w.Key || string(got.Payload) != string(w.Payload) || got.Headers["h"] != w.Headers["h"] ||
			got.Attempts != w.Attempts || got.LastError != w.LastError || got.Parked != w.Parked || !got.NotBefore.Equal(w.NotBefore) {
			t.Errorf("entry %s moved as %+v, was %+v", id, got, w)
		}
		if got.Partition != outbox.PartitionOf(w.Key, dst.Partitions()) {
			t.Errorf("entry %s is in destination partition %d, its key maps to %d", id, got.Partition, outbox.PartitionOf(w.Key, dst.Partitions()))
		}
		// A scheduled or retrying entry keeps its due time; a due one may
		// be made due earlier (to come before appended entries).
		if w.DueAt.After(time.Now()) && !got.DueAt.Equal(w.DueAt) {
			t.Errorf("entry %s is due at %v, was due at %v", id, got.DueAt, w.DueAt)
		}
		if !w.DueAt.After(time.Now()) && got.DueAt.After(time.Now()) {
			t.Errorf("entry %s was due, is now due at %v", id, got.DueAt)
		}
	}
}

func mustCount(t *testing.T, s outbox.Store) move.Counts {
	t.Helper()
	c, err := move.Count(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMoveKeepsEveryStateAcrossPartitionCounts: a move from 4 to 16
// partitions keeps due, scheduled, retrying and parked entries as they
// were, seals the source, releases the destination.
func TestMoveKeepsEveryStateAcrossPartitionCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := seed(t, 50)
	dst := memory.New(memory.Options{Partitions: 16})
	before := mustCount(t, s.src)
	if before != (move.Counts{Due: 147, Waiting: 2, Parked: 1}) {
		t.Fatalf("seeded counts: %+v", before)
	}
	opts := move.Options{SourceName: "memory://a", Batch: 7}
	id, err := move.Prepare(ctx, s.src, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := move.Prepare(ctx, s.src, dst, opts); err != nil || again != id {
		t.Fatalf("Prepare again: %q, %v; want %q", again, err, id)
	}
	hs, _ := dst.HoldState(ctx)
	if !hs.Held || hs.Reason != move.HoldReason(id, "memory://a") {
		t.Fatalf("hold after Prepare: %+v", hs)
	}
	var calls []move.Progress
	opts.Progress = func(p move.Progress) { calls = append(calls, p) }
	res, err := move.Run(ctx, s.src, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.MoveID != id || res.Moved != 150 || res.Skipped != 0 || res.ByState != before || res.AlreadyDone {
		t.Fatalf("Result: %+v", res)
	}
	if len(calls) == 0 || calls[len(calls)-1].Moved != 150 || calls[len(calls)-1].Total != 150 || calls[len(calls)-1].PartitionsDone != 4 {
		t.Fatalf("last progress: %+v", calls[len(calls)-1])
	}
	checkMoved(t, dst, s.want)
	if got := mustCount(t, s.src); got.Total() != 0 {
		t.Fatalf("source after the move: %+v", got)
	}
	if got := mustCount(t, dst); got != before {
		t.Fatalf("destination after the move: %+v, want %+v", got, before)
	}
	st, err := move.Inspect(ctx, s.src, dst, opts)
	if err != nil || !st.Complete() || !st.Sealed || st.Hold.Held {
		t.Fatalf("Inspect after the move: %+v, %v", st, err)
	}
	// Run again: nothing to do.
	res, err = move.Run(ctx, s.src, dst, opts)
	if err != nil || !res.AlreadyDone || res.Moved != 0 {
		t.Fatalf("Run after the move: %+v, %v", res, err)
	}
}

// TestStragglerAppendAfterSealFails: once Run sealed the source, an append
// to it fails with ErrSealed; Unseal accepts appends again.
func TestStragglerAppendAfterSealFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := seed(t, 3)
	dst := memory.New(memory.Options{Partitions: 2})
	opts := move.Options{SourceName: "src"}
	if _, err := move.Prepare(ctx, s.src, dst, opts); err != nil {
		t.Fatal(err)
	}
	if err := s.src.Append(ctx, outbox.Entry{Topic: "t", Key: "before-seal"}); err != nil {
		t.Fatalf("append before the seal: %v", err)
	}
	if _, err := move.Run(ctx, s.src, dst, opts); err != nil {
		t.Fatal(err)
	}
	err := s.src.Append(ctx, outbox.Entry{ID: "late", Topic: "t", Key: "k"})
	if !errors.Is(err, outbox.ErrSealed) {
		t.Fatalf("append after the seal: %v, want ErrSealed", err)
	}
	if _, err := dst.Lookup(ctx, "late"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("the refused append is somewhere: %v", err)
	}
	if err := move.Unseal(ctx, s.src); err != nil {
		t.Fatal(err)
	}
	if err := s.src.Append(ctx, outbox.Entry{ID: "late", Topic: "t", Key: "k"}); err != nil {
		t.Fatalf("append after Unseal: %v", err)
	}
}

var errCrash = errors.New("crash injected")

// TestResume: a Run stopped at several points (an error after Import and
// before RemoveExported, a cancelled context) and run again finishes the
// move with nothing lost and nothing imported twice.
func TestResume(t *testing.T) {
	t.Parallel()
	for _, stopAt := range []int{1, 2, 5, 11} {
		for _, how := range []string{"error", "cancel"} {
			t.Run(fmt.Sprintf("%sAfterImport%d", how, stopAt), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s := seed(t, 20)
				dst := memory.New(memory.Options{Partitions: 3})
				opts := move.Options{SourceName: "src", Batch: 5, Workers: 2}
				if _, err := move.Prepare(ctx, s.src, dst, opts); err != nil {
					t.Fatal(err)
				}
				runCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				var mu sync.Mutex
				calls := 0
				crashOpts := opts
				move.SetAfterImport(&crashOpts, func(int, []string) error {
					mu.Lock()
					defer mu.Unlock()
					calls++
					if calls == stopAt {
						if how == "cancel" {
							cancel()
							return runCtx.Err()
						}
						return errCrash
					}
					return nil
				})
				res1, err := move.Run(runCtx, s.src, dst, crashOpts)
				switch how {
				case "error":
					if !errors.Is(err, errCrash) {
						t.Fatalf("first run: %v, want the injected crash", err)
					}
				case "cancel":
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("first run: %v, want context.Canceled", err)
					}
				}
				st, err := move.Inspect(ctx, s.src, dst, opts)
				if err != nil {
					t.Fatal(err)
				}
				if !st.Sealed || !st.Hold.Held || st.Source.Total() == 0 {
					t.Fatalf("after the crash: %+v", st)
				}
				res2, err := move.Run(ctx, s.src, dst, opts)
				if err != nil {
					t.Fatalf("second run: %v", err)
				}
				if res2.Skipped == 0 {
					t.Errorf("the second run skipped nothing: the crashed batch was not imported again as skips (%+v)", res2)
				}
				if res1.Moved+res2.Moved != 60 {
					t.Errorf("moved %d + %d entries, want 60 in all", res1.Moved, res2.Moved)
				}
				checkMoved(t, dst, s.want)
				if got := mustCount(t, dst); got.Total() != 60 {
					t.Fatalf("destination holds %+v, want 60 entries", got)
				}
				if st, _ := move.Inspect(ctx, s.src, dst, opts); !st.Complete() {
					t.Fatalf("not complete: %+v", st)
				}
			})
		}
	}
}

// TestConflict: an entry appended to the destination with the ID of a
// source entry and another content stops the move, naming the ID; the
// source keeps the batch; once resolved, the move finishes. An identical
// one is taken for a resumed import.
func TestConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := seed(t, 5)
	dst := memory.New(memory.Options{Partitions: 2})
	opts := move.Options{SourceName: "src"}
	if _, err := move.Prepare(ctx, s.src, dst, opts); err != nil {
		t.Fatal(err)
	}
	same := s.want["k4-1"].Entry
	same.Partition, same.Attempts, same.LastError, same.CreatedAt = 0, 0, "", time.Time{}
	if err := dst.Append(ctx, same, outbox.Entry{ID: "k3-2", Topic: "orders", Key: "k3", Payload: []byte("another payload")}); err != nil {
		t.Fatal(err)
	}
	_, err := move.Run(ctx, s.src, dst, opts)
	var ce *move.ConflictError
	if !errors.As(err, &ce) || ce.ID != "k3-2" || ce.Field != "payload" || !strings.Contains(err.Error(), `"k3-2"`) {
		t.Fatalf("Run: %v, want a conflict on k3-2's payload", err)
	}
	if _, err := s.src.Lookup(ctx, "k3-2"); err != nil {
		t.Fatalf("the conflicting entry left the source: %v", err)
	}
	if err := dst.Cancel(ctx, "k3-2"); err != nil {
		t.Fatal(err)
	}
	res, err := move.Run(ctx, s.src, dst, opts)
	if err != nil {
		t.Fatalf("after resolving: %v", err)
	}
	if res.Skipped == 0 {
		t.Fatalf("nothing skipped: %+v", res)
	}
	checkMoved(t, dst, s.want)
}

// TestOrderAfterRelease: a relay runs on the held destination while
// services append to it; after the move, it delivers each key's moved
// entries before the entries appended to the destination.
func TestOrderAfterRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := memory.New(memory.Options{Partitions: 4})
	dst := memory.New(memory.Options{Partitions: 8})
	const keys = 20
	for k := range keys {
		for i := range 3 {
			if err := src.Append(ctx, outbox.Entry{ID: fmt.Sprintf("old-%d-%d", k, i), Topic: "t", Key: fmt.Sprint("k", k)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	opts := move.Options{SourceName: "src", Batch: 4}
	if _, err := move.Prepare(ctx, src, dst, opts); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string][]string{}
	n := 0
	all := make(chan struct{})
	sink := outbox.SinkFunc(func(_ context.Context, e outbox.Entry) error {
		mu.Lock()
		defer mu.Unlock()
		got[e.Key] = append(got[e.Key], e.ID)
		if n++; n == keys*5 {
			close(all)
		}
		return nil
	})
	relay, err := outbox.NewRelay(dst, sink, outbox.RelayOptions{PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer relay.Stop(ctx)
	// The rollout: services append to the destination.
	for k := range keys {
		for i := range 2 {
			if err := dst.Append(ctx, outbox.Entry{ID: fmt.Sprintf("new-%d-%d", k, i), Topic: "t", Key: fmt.Sprint("k", k)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	if n != 0 {
		t.Fatalf("the held destination delivered %d entries", n)
	}
	mu.Unlock()
	if _, err := move.Run(ctx, src, dst, opts); err != nil {
		t.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatalf("delivered %d of %d entries", n, keys*5)
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		want := []string{fmt.Sprintf("old-%d-0", k), fmt.Sprintf("old-%d-1", k), fmt.Sprintf("old-%d-2", k), fmt.Sprintf("new-%d-0", k), fmt.Sprintf("new-%d-1", k)}
		if key := fmt.Sprint("k", k); !slices.Equal(got[key], want) {
			t.Errorf("key %s delivered %v, want %v", key, got[key], want)
		}
	}
}

// TestWaitsForSourceLease: Run waits for a source partition whose lease a
// relay of the source still holds, reporting who holds it, and moves it
// once the lease is released.
func TestWaitsForSourceLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := seed(t, 4)
	dst := memory.New(memory.Options{Partitions: 2})
	l, err := s.src.AcquireLease(ctx, 1, "relay-7", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waits := make(chan move.LeaseWait, 100)
	opts := move.Options{SourceName: "src", PollInterval: 5 * time.Millisecond, Progress: func(p move.Progress) {
		if p.Waiting != nil {
			select {
			case waits <- *p.Waiting:
			default:
			}
		}
	}}
	if _, err := move.Prepare(ctx, s.src, dst, opts); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := move.Run(ctx, s.src, dst, opts); done <- err }()
	w := <-waits
	if w.Partition != 1 || w.Owner != "relay-7" || !w.Expires.Equal(l.Expires) {
		t.Fatalf("wait reported: %+v, want partition 1 held by relay-7 until %v", w, l.Expires)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned while a partition was held: %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	if err := s.src.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkMoved(t, dst, s.want)
}

// TestResumedRunRetakesItsLeases: a killed mover's leases (same default
// owner) are retaken at once.
func TestResumedRunRetakesItsLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := seed(t, 4)
	dst := memory.New(memory.Options{Partitions: 2})
	for p := range s.src.Partitions() {
		if _, err := s.src.AcquireLease(ctx, p, move.DefaultOwner, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	opts := move.Options{SourceName: "src"}
	if _, err := move.Prepare(ctx, s.src, dst, opts); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := move.Run(runCtx, s.src, dst, opts); err != nil {
		t.Fatal(err)
	}
}

// storeOnly hides every optional interface of a store.
type storeOnly struct{ outbox.Store }

// noSealer hides the Sealer of a memory backend.
type noSealer struct {
	outbox.Store
	outbox.Exporter
	outbox.Inspector
}

// TestBadInput: each is refused with an error that names the problem, and
// nothing is changed.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := move.Options{SourceName: "src"}

	t.Run("SameStore", func(t *testing.T) {
		t.Parallel()
		b := memory.New(memory.Options{})
		if _, err := move.Prepare(ctx, b, b, opts); err == nil || !strings.Contains(err.Error(), "same outbox") {
			t.Fatalf("Prepare(b, b): %v", err)
		}
		if _, err := move.Run(ctx, b, b, opts); err == nil || !strings.Contains(err.Error(), "same outbox") {
			t.Fatalf("Run(b, b): %v", err)
		}
	})
	t.Run("DestinationNotEmpty", func(t *testing.T) {
		t.Parallel()
		src, dst := memory.New(memory.Options{}), memory.New(memory.Options{})
		if err := dst.Append(ctx, outbox.Entry{Topic: "t"}, outbox.Entry{Topic: "t", NotBefore: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		_, err := move.Prepare(ctx, src, dst, opts)
		if err == nil || !strings.Contains(err.Error(), "not empty (2 entries (1 due, 1 waiting, 0 parked))") {
			t.Fatalf("Prepare: %v", err)
		}
		if hs, _ := dst.HoldState(ctx); hs.Held {
			t.Fatal("the destination was held")
		}
	})
	t.Run("HeldByAnotherMove", func(t *testing.T) {
		t.Parallel()
		src, dst := memory.New(memory.Options{}), memory.New(memory.Options{})
		if _, err := move.Prepare(ctx, src, dst, move.Options{SourceName: "other"}); err != nil {
			t.Fatal(err)
		}
		if _, err := move.Prepare(ctx, src, dst, opts); err == nil || !strings.Contains(err.Error(), "held by another move") || !strings.Contains(err.Error(), "from other") {
			t.Fatalf("Prepare: %v", err)
		}
		if _, err := move.Run(ctx, src, dst, opts); err == nil || !strings.Contains(err.Error(), "not by a move from src") {
			t.Fatalf("Run: %v", err)
		}
		if sealed, _ := src.Sealed(ctx); sealed {
			t.Fatal("Run sealed the source")
		}
		if err := move.Release(ctx, src, dst, opts); err == nil {
			t.Fatal("Release released another move's hold")
		}
	})
	t.Run("NotPrepared", func(t *testing.T) {
		t.Parallel()
		src, dst := memory.New(memory.Options{}), memory.New(memory.Options{})
		if err := src.Append(ctx, outbox.Entry{Topic: "t"}); err != nil {
			t.Fatal(err)
		}
		if _, err := move.Run(ctx, src, dst, opts); err == nil || !strings.Contains(err.Error(), "--prepare") {
			t.Fatalf("Run: %v", err)
		}
		if sealed, _ := src.Sealed(ctx); sealed {
			t.Fatal("Run sealed the source")
		}
	})
	t.Run("MissingInterface", func(t *testing.T) {
		t.Parallel()
		src, dst := memory.New(memory.Options{}), memory.New(memory.Options{})
		if _, err := move.Run(ctx, storeOnly{src}, dst, opts); err == nil || !strings.Contains(err.Error(), "does not implement outbox.Exporter") {
			t.Fatalf("source without Exporter: %v", err)
		}
		if _, err := move.Run(ctx, noSealer{src, src, src}, dst, opts); err == nil || !strings.Contains(err.Error(), "does not implement outbox.Sealer") {
			t.Fatalf("source without Sealer: %v", err)
		}
		if _, err := move.Prepare(ctx, src, storeOnly{dst}, opts); err == nil || !strings.Contains(err.Error(), "does not implement outbox.Importer") {
			t.Fatalf("destination without Importer: %v", err)
		}
	})
	t.Run("ReleaseAfterSealWithEntriesLeft", func(t *testing.T) {
		t.Parallel()
		src, dst := memory.New(memory.Options{}), memory.New(memory.Options{})
		if err := src.Append(ctx, outbox.Entry{Topic: "t"}); err != nil {
			t.Fatal(err)
		}
		if _, err := move.Prepare(ctx, src, dst, opts); err != nil {
			t.Fatal(err)
		}
		if err := src.Seal(ctx); err != nil {
			t.Fatal(err)
		}
		if err := move.Release(ctx, src, dst, opts); err == nil || !strings.Contains(err.Error(), "--unseal") {
			t.Fatalf("Release: %v", err)
		}
		if err := move.Unseal(ctx, src); err != nil {
			t.Fatal(err)
		}
		if err := move.Release(ctx, src, dst, opts); err != nil {
			t.Fatalf("Release after Unseal: %v", err)
		}
		if hs, _ := dst.HoldState(ctx); hs.Held {
			t.Fatal("still held")
		}
	})
	t.Run("BadOptions", func(t *testing.T) {
		t.Parallel()
		src, dst := memory.New(memory.Options{}), memory.New(memory.Options{})
		if _, err := move.Run(ctx, src, dst, move.Options{Batch: -1}); err == nil || !strings.Contains(err.Error(), "Options.Batch") {
			t.Fatalf("Run: %v", err)
		}
	})
}

func TestHoldReason(t *testing.T) {
	t.Parallel()
	r := move.HoldReason("m1", `redis://h:6379/0 prefix "{a b}"`)
	id, from, ok := move.ParseHoldReason(r)
	if !ok || id != "m1" || from != `redis://h:6379/0 prefix "{a b}"` {
		t.Fatalf("ParseHoldReason(%q) = %q, %q, %v", r, id, from, ok)
	}
	for _, bad := range []string{"", "maintenance", "outbox move  from x", "outbox move m1"} {
		if _, _, ok := move.ParseHoldReason(bad); ok {
			t.Errorf("ParseHoldReason(%q) took it for a move's", bad)
		}
	}
}

// TestUnsealedDuringRunKeepsDestinationHeld: a source unsealed while Run
// moves it (outbox move --unseal, a rollback) is not treated as done: Run
// fails and leaves the destination held, as its doc says it releases the
// destination only when the source is sealed and empty.
func TestUnsealedDuringRunKeepsDestinationHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := seed(t, 5)
	dst := memory.New(memory.Options{Partitions: 2})
	opts := move.Options{SourceName: "src", Batch: 2, Workers: 1}
	if _, err := move.Prepare(ctx, s.src, dst, opts); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	runOpts := opts
	move.SetAfterImport(&runOpts, func(int, []string) error {
		once.Do(func() {
			if err := move.Unseal(ctx, s.src); err != nil {
				t.Error(err)
			}
		})
		return nil
	})
	res, err := move.Run(ctx, s.src, dst, runOpts)
	if err == nil || !strings.Contains(err.Error(), "no longer sealed") {
		t.Fatalf("Run: %v, want an error saying the source is no longer sealed", err)
	}
	if res.Sealed {
		t.Errorf("Result.Sealed is true for an unsealed source")
	}
	hs, err := dst.HoldState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hs.Held {
		t.Fatal("the destination was released although the source was unsealed during the move")
	}
	// Running the move again seals the source again and finishes.
	if _, err := move.Run(ctx, s.src, dst, opts); err != nil {
		t.Fatalf("second run: %v", err)
	}
	checkMoved(t, dst, s.want)
}

// TestInterruptedBeforeSeal: a Run whose context ends before the seal
// returns the context's error as it is and reports the source as not
// sealed (the CLI must not claim it is).
func TestInterruptedBeforeSeal(t *testing.T) {
	t.Parallel()
	s := seed(t, 2)
	dst := memory.New(memory.Options{Partitions: 2})
	opts := move.Options{SourceName: "src"}
	if _, err := move.Prepare(context.Background(), s.src, dst, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := move.Run(ctx, s.src, dst, opts)
	if err != context.Canceled { //nolint:errorlint // context errors pass through unwrapped
		t.Fatalf("Run: %v, want context.Canceled as it is", err)
	}
	if res.Sealed {
		t.Error("Result.Sealed is true, but nothing was sealed")
	}
	if sealed, err := s.src.Sealed(context.Background()); err != nil || sealed {
		t.Fatalf("Sealed: %v, %v", sealed, err)
	}
}

// TestConflictKeepsKeyOrder: a conflict on an entry that has later
// entries of its key in the batch. Whichever copy is cancelled, the key's
// entries end in the destination in their order: the run that found the
// conflict withdrew the later ones it had imported.
func TestConflictKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := seed(t, 5)
	dst := memory.New(memory.Options{Partitions: 2})
	opts := move.Options{SourceName: "src"}
	if _, err := move.Prepare(ctx, s.src, dst, opts); err != nil {
		t.Fatal(err)
	}
	if err := dst.Append(ctx, outbox.Entry{ID: "k3-1", Topic: "orders", Key: "k3", Payload: []byte("another payload")}); err != nil {
		t.Fatal(err)
	}
	var ce *move.ConflictError
	if _, err := move.Run(ctx, s.src, dst, opts); !errors.As(err, &ce) || ce.ID != "k3-1" {
		t.Fatalf("Run: %v, want a conflict on k3-1", err)
	}
	if _, err := dst.Lookup(ctx, "k3-2"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("k3-2, after the conflicting k3-1, is still in the destination (%v): it would come before k3-1", err)
	}
	if err := dst.Cancel(ctx, "k3-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := move.Run(ctx, s.src, dst, opts); err != nil {
		t.Fatalf("after resolving: %v", err)
	}
	checkMoved(t, dst, s.want)
	p := outbox.PartitionOf("k3", dst.Partitions())
	l, err := dst.AcquireLease(ctx, p, "t", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	es, err := dst.ExportBatch(ctx, l, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range es {
		if e.Key == "k3" {
			order = append(order, e.ID)
		}
	}
	if !slices.Equal(order, []string{"k3-0", "k3-1", "k3-2"}) {
		t.Fatalf("key k3 in the destination in the order %v, want k3-0 k3-1 k3-2", order)
	}
}

// releasingSource unholds the destination just before it seals: a
// `outbox move --release` that raced the start of the move.
type releasingSource struct {
	*memory.Backend
	dst *memory.Backend
}

func (s releasingSource) Seal(ctx context.Context) error {
	if err := s.dst.Unhold(ctx); err != nil {
		return err
	}
	return s.Backend.Seal(ctx)
}

// TestReleaseRacingTheSeal: a destination released between Run's
// inspection and its seal is found after the seal; Run moves nothing and
// unseals the source again.
func TestReleaseRacingTheSeal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := seed(t, 3)
	dst := memory.New(memory.Options{Partitions: 2})
	opts := move.Options{SourceName: "src"}
	src := releasingSource{Backend: s.src, dst: dst}
	if _, err := move.Prepare(ctx, src, dst, opts); err != nil {
		t.Fatal(err)
	}
	res, err := move.Run(ctx, src, dst, opts)
	if err == nil || !strings.Contains(err.Error(), "was released") || res.Moved != 0 || res.Sealed {
		t.Fatalf("Run: %+v, %v; want an error saying the destination was released, nothing moved, the source unsealed", res, err)
	}
	if sealed, _ := s.src.Sealed(ctx); sealed {
		t.Fatal("the source stayed sealed")
	}
	if st, _ := dst.Stats(ctx); st.Pending+st.Parked != 0 {
		t.Fatalf("the destination holds %+v", st)
	}
}
