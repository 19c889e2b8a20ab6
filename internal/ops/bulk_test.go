package ops_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/internal/ops"
)

func TestRequeue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		ids        []string
		batch      int
		wantChunks [][]string
		wantN      []int // requeued per chunk
		wantLeft   []string
	}{
		{"InChunks", []string{"p00", "p01", "p02", "p03", "p04", "p05", "p06"}, 3,
			[][]string{{"p00", "p01", "p02"}, {"p03", "p04", "p05"}, {"p06"}}, []int{3, 3, 1}, nil},
		{"DefaultBatch", []string{"p06", "p00"}, 0, [][]string{{"p06", "p00"}}, []int{2}, []string{"p01", "p02", "p03", "p04", "p05"}},
		{"NotParkedAreIgnored", []string{"p01", "q00", "nope", "p02"}, 2, [][]string{{"p01", "q00"}, {"nope", "p02"}}, []int{1, 1},
			[]string{"p00", "p03", "p04", "p05", "p06"}},
		{"Nothing", nil, 2, nil, nil, []string{"p00", "p01", "p02", "p03", "p04", "p05", "p06"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, s store) {
				ctx := context.Background()
				seed(t, s, 7, 1)
				var chunks [][]string
				var ns []int
				res, err := ops.Requeue(ctx, s, tc.ids, ops.RequeueOptions{Batch: tc.batch, Progress: func(c ops.RequeueChunk) {
					chunks = append(chunks, c.IDs)
					ns = append(ns, c.Requeued)
					if len(c.Refused) != 0 {
						t.Errorf("refused: %+v", c.Refused)
					}
				}})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.EqualFunc(chunks, tc.wantChunks, slices.Equal) || !slices.Equal(ns, tc.wantN) {
					t.Errorf("chunks %q requeued %v; want %q requeued %v", chunks, ns, tc.wantChunks, tc.wantN)
				}
				total := 0
				for _, n := range tc.wantN {
					total += n
				}
				if res.Requeued != total || len(res.Refused) != 0 {
					t.Errorf("result %+v; want %d requeued", res, total)
				}
				if left := parkedIDs(t, s); !slices.Equal(left, tc.wantLeft) {
					t.Errorf("left parked: %q; want %q", left, tc.wantLeft)
				}
				for _, id := range tc.ids {
					if info, err := s.Lookup(ctx, id); err == nil && info.Parked {
						t.Errorf("%s is still parked", id)
					}
				}
			})
		})
	}
}

// TestRequeueRefused: an entry the store refuses stays parked, is counted
// and reported with its chunk, and the others are requeued.
func TestRequeueRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memory.New(memory.Options{})
	seed(t, s, 3, 0)
	// The in-memory backend refuses an entry imported parked without a
	// topic.
	if _, err := s.Import(ctx, []outbox.EntryInfo{{Entry: outbox.Entry{ID: "p01x", Key: "k", CreatedAt: epoch}, Parked: true}}); err != nil {
		t.Fatal(err)
	}
	var refusedInChunks []outbox.Refusal
	res, err := ops.Requeue(ctx, s, []string{"p00", "p01x", "p01", "p02"}, ops.RequeueOptions{Batch: 2, Progress: func(c ops.RequeueChunk) {
		refusedInChunks = append(refusedInChunks, c.Refused...)
	}})
	if err != nil {
		t.Fatalf("Requeue: %v; want a refusal counted, not returned", err)
	}
	if res.Requeued != 3 || len(res.Refused) != 1 || res.Refused[0].ID != "p01x" || res.Refused[0].Reason == "" {
		t.Errorf("result %+v; want 3 requeued and p01x refused with its reason", res)
	}
	if !slices.Equal(refusedInChunks, res.Refused) {
		t.Errorf("chunks reported %+v; want %+v", refusedInChunks, res.Refused)
	}
	if left := parkedIDs(t, s); !slices.Equal(left, []string{"p01x"}) {
		t.Errorf("left parked: %q", left)
	}
}

// failingRequeuer fails its call number fail (from 1) after requeueing
// one entry of it.
type failingRequeuer struct {
	ops.Requeuer
	calls, fail int
}

func (f *failingRequeuer) Requeue(ctx context.Context, ids ...string) (int, error) {
	f.calls++
	if f.calls == f.fail {
		n, _ := f.Requeuer.Requeue(ctx, ids[0])
		return n, errStore
	}
	return f.Requeuer.Requeue(ctx, ids...)
}

func TestRequeueStoreErrorStops(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{})
	seed(t, s, 7, 0)
	chunks := 0
	res, err := ops.Requeue(context.Background(), &failingRequeuer{Requeuer: s, fail: 2}, []string{"p00", "p01", "p02", "p03", "p04", "p05", "p06"},
		ops.RequeueOptions{Batch: 3, Progress: func(ops.RequeueChunk) { chunks++ }})
	if err != errStore {
		t.Fatalf("err = %v; want the store's error as it is", err)
	}
	if res.Requeued != 4 || chunks != 1 {
		t.Errorf("result %+v after %d chunks; want 4 requeued (3, then 1 with the error), one chunk reported", res, chunks)
	}
	if left := parkedIDs(t, s); !slices.Equal(left, []string{"p04", "p05", "p06"}) {
		t.Errorf("left parked: %q; the chunks after the error must not run", left)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	type step struct {
		id string
		o  ops.Outcome
	}
	tests := []struct {
		name      string
		ids       []string
		recheck   bool
		want      ops.CancelResult
		wantSteps []step
		wantLeft  []string
	}{
		{"ParkedAndPending", []string{"p00", "q00", "nope", "p02"}, false, ops.CancelResult{Cancelled: 3, NotFound: 1},
			[]step{{"p00", ops.Cancelled}, {"q00", ops.Cancelled}, {"nope", ops.NotFound}, {"p02", ops.Cancelled}}, []string{"p01"}},
		{"RecheckLeavesPendingAlone", []string{"p00", "q00", "nope", "p02"}, true, ops.CancelResult{Cancelled: 2, LeftAlone: 2},
			[]step{{"p00", ops.Cancelled}, {"q00", ops.LeftAlone}, {"nope", ops.LeftAlone}, {"p02", ops.Cancelled}}, []string{"p01"}},
		{"Nothing", nil, false, ops.CancelResult{}, nil, []string{"p00", "p01", "p02"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, s store) {
				ctx := context.Background()
				seed(t, s, 3, 1)
				var opts ops.CancelOptions
				if tc.recheck {
					opts.Recheck = s
				}
				var steps []step
				opts.Progress = func(id string, o ops.Outcome) { steps = append(steps, step{id, o}) }
				res, err := ops.Cancel(ctx, s, tc.ids, opts)
				if err != nil {
					t.Fatal(err)
				}
				if res != tc.want || !slices.Equal(steps, tc.wantSteps) {
					t.Errorf("Cancel = %+v, steps %v; want %+v, steps %v", res, steps, tc.want, tc.wantSteps)
				}
				if left := parkedIDs(t, s); !slices.Equal(left, tc.wantLeft) {
					t.Errorf("left parked: %q; want %q", left, tc.wantLeft)
				}
				_, err = s.Lookup(ctx, "q00")
				if pendingKept := err == nil; pendingKept != tc.recheck && tc.ids != nil {
					t.Errorf("pending q00 kept: %v (Lookup: %v), with recheck %v", pendingKept, err, tc.recheck)
				}
			})
		})
	}
}

// failingCanceler fails every Cancel of the entry fail.
type failingCanceler struct {
	outbox.Canceler
	fail string
}

func (f failingCanceler) Cancel(ctx context.Context, id string) error {
	if id == f.fail {
		return errStore
	}
	return f.Canceler.Cancel(ctx, id)
}

func TestCancelStoreErrorStops(t *testing.T) {
	t.Parallel()
	ids := []string{"p00", "p01", "p02"}
	tests := []struct {
		name   string
		opts   func(s store) (outbox.Canceler, ops.CancelOptions)
		lookup bool // the error is a *LookupError of p01
	}{
		{"Cancel", func(s store) (outbox.Canceler, ops.CancelOptions) {
			return failingCanceler{Canceler: s, fail: "p01"}, ops.CancelOptions{}
		}, false},
		{"Recheck", func(s store) (outbox.Canceler, ops.CancelOptions) {
			return s, ops.CancelOptions{Recheck: &failingLooker{Looker: s, ok: 1}}
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := memory.New(memory.Options{})
			seed(t, s, 3, 0)
			c, opts := tc.opts(s)
			res, err := ops.Cancel(context.Background(), c, ids, opts)
			if tc.lookup {
				le, ok := err.(*ops.LookupError)
				if !ok || le.ID != "p01" || le.Err != errStore || le.Error() != fmt.Sprintf("looking entry p01 up: %v", errStore) {
					t.Fatalf("err = %v; want a *LookupError of p01 wrapping the store's", err)
				}
			} else if err != errStore {
				t.Fatalf("err = %v; want the store's error as it is", err)
			}
			if res.Cancelled != 1 {
				t.Errorf("result %+v; want 1 cancelled before the error", res)
			}
			if left := parkedIDs(t, s); !slices.Equal(left, []string{"p01", "p02"}) {
				t.Errorf("left parked: %q; nothing after the error may run", left)
			}
		})
	}
}
