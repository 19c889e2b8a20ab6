package ops_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/ops"
)

func TestDedupe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want []string
	}{
		{nil, []string{}},
		{[]string{"a"}, []string{"a"}},
		{[]string{"b", "a", "b", "c", "a"}, []string{"b", "a", "c"}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.in), func(t *testing.T) {
			t.Parallel()
			in := slices.Clone(tc.in)
			got := ops.Dedupe(in)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Dedupe(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("Dedupe changed its input to %q", in)
			}
		})
	}
}

func TestByCreation(t *testing.T) {
	t.Parallel()
	es := []outbox.Entry{
		{ID: "c", CreatedAt: epoch.Add(time.Second)},
		{ID: "b", CreatedAt: epoch},
		{ID: "d", CreatedAt: epoch.Add(-time.Second)},
		{ID: "a", CreatedAt: epoch},
	}
	ops.ByCreation(es)
	if got := ops.IDs(es); !slices.Equal(got, []string{"d", "a", "b", "c"}) {
		t.Errorf("ByCreation: %q; want oldest first, ties by ID", got)
	}
}

func TestPage(t *testing.T) {
	t.Parallel()
	now := epoch.Add(time.Hour)
	orders, err := ops.ParseFilter(ops.FilterSpec{Topic: "orders"}, now)
	if err != nil {
		t.Fatal(err)
	}
	// 10 parked (p00..p09; orders are the even ones) and 2 pending.
	tests := []struct {
		name     string
		f        ops.Filter
		after    string
		limit    int
		opts     ops.PageOptions
		want     []string
		wantNext string
	}{
		{"FirstPage", ops.Filter{}, "", 4, ops.PageOptions{}, []string{"p00", "p01", "p02", "p03"}, "p03"},
		{"NextPage", ops.Filter{}, "p03", 4, ops.PageOptions{}, []string{"p04", "p05", "p06", "p07"}, "p07"},
		{"LastPageShort", ops.Filter{}, "p07", 4, ops.PageOptions{}, []string{"p08", "p09"}, ""},
		{"LastPageFull", ops.Filter{}, "p05", 4, ops.PageOptions{Batch: 5}, []string{"p06", "p07", "p08", "p09"}, ""},
		{"LastPageExactBatch", ops.Filter{}, "p05", 4, ops.PageOptions{}, []string{"p06", "p07", "p08", "p09"}, "p09"},
		{"Filtered", orders, "", 3, ops.PageOptions{Batch: 2}, []string{"p00", "p02", "p04"}, "p04"},
		{"FilteredToTheEnd", orders, "p04", 3, ops.PageOptions{Batch: 2}, []string{"p06", "p08"}, ""},
		{"MaxScanStops", orders, "", 5, ops.PageOptions{Batch: 3, MaxScan: 4}, []string{"p00", "p02", "p04"}, "p05"},
		{"MaxScanFindsNone", orders, "p00", 5, ops.PageOptions{Batch: 1, MaxScan: 1}, nil, "p01"},
	}
	eachBackend(t, func(t *testing.T, s store) {
		seed(t, s, 10, 2)
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				got, next, err := ops.Page(context.Background(), s, tc.f, tc.after, tc.limit, tc.opts)
				if err != nil {
					t.Fatal(err)
				}
				if ids := ops.IDs(got); !slices.Equal(ids, tc.want) || next != tc.wantNext {
					t.Errorf("Page(after %q, limit %d, %+v) = %q, next %q; want %q, next %q", tc.after, tc.limit, tc.opts, ids, next, tc.want, tc.wantNext)
				}
			})
		}
	})
}

func TestCollect(t *testing.T) {
	t.Parallel()
	now := epoch.Add(time.Hour)
	timeouts, err := ops.ParseFilter(ops.FilterSpec{Error: "timeout"}, now)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		f        ops.Filter
		opts     ops.CollectOptions
		want     []string
		wantMore bool
	}{
		{"Every", ops.Filter{}, ops.CollectOptions{Batch: 3}, []string{"p00", "p01", "p02", "p03", "p04", "p05", "p06"}, false},
		{"DefaultBatch", timeouts, ops.CollectOptions{}, []string{"p00", "p02", "p04", "p06"}, false},
		{"Max", timeouts, ops.CollectOptions{Batch: 2, Max: 3}, []string{"p00", "p02", "p04"}, true},
		{"MaxIsAll", timeouts, ops.CollectOptions{Batch: 2, Max: 4}, []string{"p00", "p02", "p04", "p06"}, false},
	}
	eachBackend(t, func(t *testing.T, s store) {
		seed(t, s, 7, 2)
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				got, more, err := ops.Collect(context.Background(), s, tc.f, tc.opts)
				if err != nil {
					t.Fatal(err)
				}
				if ids := ops.IDs(got); !slices.Equal(ids, tc.want) || more != tc.wantMore {
					t.Errorf("Collect(%+v) = %q, more %v; want %q, more %v", tc.opts, ids, more, tc.want, tc.wantMore)
				}
				for _, e := range got {
					if e.Payload != nil || e.Headers != nil || e.LastError != "" || e.Topic == "" || e.CreatedAt.IsZero() {
						t.Errorf("Collect kept more or less than it says: %+v", e)
					}
				}
			})
		}
	})
}

func TestCheckParked(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s store) {
		seed(t, s, 3, 1)
		parked, left, err := ops.CheckParked(context.Background(), s, []string{"p02", "nope", "q00", "p00"})
		if err != nil {
			t.Fatal(err)
		}
		if ids := ops.IDs(parked); !slices.Equal(ids, []string{"p02", "p00"}) || parked[0].CreatedAt.IsZero() {
			t.Errorf("parked: %+v; want p02 and p00 with their fields", parked)
		}
		want := []outbox.Refusal{{ID: "nope", Reason: ops.ReasonNotFound}, {ID: "q00", Reason: ops.ReasonNotParked}}
		if !slices.Equal(left, want) {
			t.Errorf("left: %+v; want %+v", left, want)
		}
	})
}

// failingLooker fails every Lookup after the first ok of them.
type failingLooker struct {
	outbox.Looker
	ok int
}

var errStore = errors.New("store: connection reset")

func (f *failingLooker) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	if f.ok == 0 {
		return outbox.EntryInfo{}, errStore
	}
	f.ok--
	return f.Looker.Lookup(ctx, id)
}

func TestCheckParkedStoreError(t *testing.T) {
	t.Parallel()
	s := backends[0].open(t)
	seed(t, s, 3, 0)
	parked, left, err := ops.CheckParked(context.Background(), &failingLooker{Looker: s, ok: 2}, []string{"p00", "nope", "p01"})
	if err != errStore {
		t.Fatalf("err = %v; want the store's error as it is", err)
	}
	if ids := ops.IDs(parked); !slices.Equal(ids, []string{"p00"}) || len(left) != 1 {
		t.Errorf("before the error: parked %q, left %+v", ids, left)
	}
}
