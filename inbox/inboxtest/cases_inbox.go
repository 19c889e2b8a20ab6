package inboxtest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/inbox"
)

func inboxCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{"DuplicatesSkipHandler", duplicatesSkipHandler[Tx]},
		{"GapReportedAndApplied", gapReportedAndApplied[Tx]},
		{"HandlerErrorRollsBack", handlerErrorRollsBack[Tx]},
		{"OffsetsStoredWithBatch", offsetsStoredWithBatch[Tx]},
		{"GapHeldUntilTheMissingArrives", gapHeldUntilMissing[Tx]},
		{"ApplyInCallersTransaction", applyInCallersTransaction[Tx]},
	}
}

// calls is a handler that notes the IDs it was called with.
type calls struct {
	mu  sync.Mutex
	ids []string
}

func handler[Tx any](c *calls) inbox.Handler[Tx] {
	return func(_ context.Context, _ Tx, m inbox.Message) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.ids = append(c.ids, m.ID)
		return nil
	}
}

func (c *calls) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ids
	c.ids = nil
	return out
}

func outcomes(rs []inbox.Result) []inbox.Outcome {
	out := make([]inbox.Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.Outcome
	}
	return out
}

func duplicatesSkipHandler[Tx any](t *testing.T, e *env[Tx]) {
	ib := e.inbox(inbox.Options{})
	var c calls
	h := handler[Tx](&c)
	ctx := e.ctx()
	for i, want := range []inbox.Outcome{inbox.Applied, inbox.Duplicate} {
		r, err := ib.Handle(ctx, inbox.Message{ID: "m1"}, h)
		if err != nil || r.Outcome != want {
			t.Fatalf("Handle(m1) #%d = %v, %v; want %v", i+1, r.Outcome, err, want)
		}
	}
	if got := c.take(); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("handler calls for m1 handled twice = %v, want [m1]", got)
	}
	rs, err := ib.HandleBatch(ctx, []inbox.Message{{ID: "m1"}, {ID: "m2"}, {ID: "m2"}, {ID: "m3"}}, h)
	if err != nil {
		t.Fatalf("HandleBatch = %v", err)
	}
	want := []inbox.Outcome{inbox.Duplicate, inbox.Applied, inbox.Duplicate, inbox.Applied}
	if got := outcomes(rs); !slices.Equal(got, want) {
		t.Fatalf("HandleBatch(m1 m2 m2 m3) outcomes = %v, want %v", got, want)
	}
	if got := c.take(); !slices.Equal(got, []string{"m2", "m3"}) {
		t.Fatalf("handler calls = %v, want [m2 m3]", got)
	}
}

// gapReportedAndApplied: under the default policy a message that skips
// numbers is applied with its gap reported; a late one is applied and
// leaves the key's number.
func gapReportedAndApplied[Tx any](t *testing.T, e *env[Tx]) {
	ib := e.inbox(inbox.Options{})
	var c calls
	h := handler[Tx](&c)
	rs, err := ib.HandleBatch(e.ctx(), []inbox.Message{
		{ID: "k1", Key: "k", Seq: 1},
		{ID: "k4", Key: "k", Seq: 4},
		{ID: "k2", Key: "k", Seq: 2},
		{ID: "j5", Key: "j", Seq: 5},
	}, h)
	if err != nil {
		t.Fatalf("HandleBatch = %v", err)
	}
	want := []inbox.Result{
		{Outcome: inbox.Applied},
		{Outcome: inbox.Applied, Gap: &inbox.Gap{Key: "k", From: 2, To: 3}},
		{Outcome: inbox.Applied, Late: true},
		{Outcome: inbox.Applied, First: true},
	}
	for i := range want {
		if !sameResult(rs[i], want[i]) {
			t.Errorf("result %d = %+v (gap %v), want %+v (gap %v)", i, rs[i], rs[i].Gap, want[i], want[i].Gap)
		}
	}
	if got, want := e.seqs("k", "j"), map[string]int64{"k": 4, "j": 5}; !maps.Equal(got, want) {
		t.Fatalf("KeySeqs(k, j) = %v, want %v", got, want)
	}
	r, err := ib.Handle(e.ctx(), inbox.Message{ID: "k7", Key: "k", Seq: 7}, h)
	if err != nil || r.Gap == nil || *r.Gap != (inbox.Gap{Key: "k", From: 5, To: 6}) {
		t.Fatalf("Handle(k7) after k4 committed = %+v, %v; want the gap 5..6 of k", r, err)
	}
	if got := c.take(); !slices.Equal(got, []string{"k1", "k4", "k2", "j5", "k7"}) {
		t.Fatalf("handler calls = %v", got)
	}
}

func sameResult(a, b inbox.Result) bool {
	if a.Outcome != b.Outcome || a.Late != b.Late || a.First != b.First || (a.Gap == nil) != (b.Gap == nil) {
		return false
	}
	return a.Gap == nil || *a.Gap == *b.Gap
}

// handlerErrorRollsBack: a handler's error fails the batch, wrapped, and
// nothing of it stays: records, key numbers, offsets.
func handlerErrorRollsBack[Tx any](t *testing.T, e *env[Tx]) {
	ib := e.inbox(inbox.Options{})
	errEffect := errors.New("effect failed")
	msgs := []inbox.Message{
		{ID: "r", Key: "rk", Seq: 3, Offset: &inbox.Offset{Group: "g", Topic: "t", Partition: 0, Next: 10}},
		{ID: "bad"},
	}
	_, err := ib.HandleBatch(e.ctx(), msgs, func(_ context.Context, _ Tx, m inbox.Message) error {
		if m.ID == "bad" {
			return errEffect
		}
		return nil
	})
	if !errors.Is(err, errEffect) {
		t.Fatalf("HandleBatch with a failing handler = %v, want its error wrapped", err)
	}
	e.wantNothing("a batch whose handler failed")
	wantAnswers(t, "Record(bad)", e.probe("bad"), []bool{true})
}

// offsetsStoredWithBatch: a batch stores the highest Next of each
// partition, duplicates included.
func offsetsStoredWithBatch[Tx any](t *testing.T, e *env[Tx]) {
	ib := e.inbox(inbox.Options{})
	var c calls
	off := func(p int32, next int64) *inbox.Offset {
		return &inbox.Offset{Group: "g", Topic: "t", Partition: p, Next: next}
	}
	if _, err := ib.Handle(e.ctx(), inbox.Message{ID: "dup", Offset: off(0, 1)}, handler[Tx](&c)); err != nil {
		t.Fatalf("Handle = %v", err)
	}
	_, err := ib.HandleBatch(e.ctx(), []inbox.Message{
		{ID: "a", Offset: off(0, 2)},
		{ID: "b", Offset: off(1, 6)},
		{ID: "c", Offset: off(0, 3)},
		{ID: "dup", Offset: off(0, 4)},
		{ID: "d", Offset: off(1, 5)},
	}, handler[Tx](&c))
	if err != nil {
		t.Fatalf("HandleBatch = %v", err)
	}
	if got, want := e.offsets("g", "t"), map[int32]int64{0: 4, 1: 6}; !maps.Equal(got, want) {
		t.Fatalf("Offsets after a batch = %v, want %v (the highest Next of each partition, duplicates included)", got, want)
	}
}

// gapHeldUntilMissing: under GapHold a message that skips a number is
// rolled back and tried again until another handler applies the missing
// one; it is then applied in order (the held transactions left no guard
// behind that would make the other wait).
func gapHeldUntilMissing[Tx any](t *testing.T, e *env[Tx]) {
	ib := e.inbox(inbox.Options{Gaps: inbox.GapHold, GapHold: caseTimeout, GapRetry: 5 * time.Millisecond})
	var c calls
	ctx := e.ctx()
	if _, err := ib.Handle(ctx, inbox.Message{ID: "k1", Key: "k", Seq: 1}, handler[Tx](&c)); err != nil {
		t.Fatalf("Handle(k1) = %v", err)
	}
	type answer struct {
		r   inbox.Result
		err error
	}
	held := make(chan answer, 1)
	go func() {
		r, err := ib.Handle(ctx, inbox.Message{ID: "k3", Key: "k", Seq: 3}, handler[Tx](&c))
		held <- answer{r, err}
	}()
	if r, err := ib.Handle(ctx, inbox.Message{ID: "k2", Key: "k", Seq: 2}, handler[Tx](&c)); err != nil || r.Outcome != inbox.Applied {
		t.Fatalf("Handle(k2) while k3 is held = %+v, %v; want applied", r, err)
	}
	select {
	case a := <-held:
		if a.err != nil || a.r.Outcome != inbox.Applied || a.r.Gap != nil {
			t.Fatalf("Handle(k3), held for k2 = %+v, %v; want applied without a gap once k2 was", a.r, a.err)
		}
	case <-time.After(caseTimeout):
		t.Fatalf("watchdog: Handle(k3) not applied %v after k2 was", caseTimeout)
	}
	if got := e.seqs("k"); got["k"] != 3 {
		t.Fatalf("KeySeqs(k) = %v, want 3", got)
	}
}

// applyInCallersTransaction: Apply records in the caller's transaction,
// which decides: rolled back, nothing is applied; committed, it is.
func applyInCallersTransaction[Tx any](t *testing.T, e *env[Tx]) {
	ib := e.inbox(inbox.Options{})
	var c calls
	msgs := []inbox.Message{
		{ID: "a", Key: "k", Seq: 1, Offset: &inbox.Offset{Group: "g", Topic: "t", Partition: 0, Next: 1}},
		{ID: "a"},
	}
	for _, commit := range []bool{false, true} {
		err := e.s.InTx(e.ctx(), func(ctx context.Context, tx Tx) error {
			rs, err := ib.Apply(ctx, tx, msgs, handler[Tx](&c))
			if err != nil {
				return err
			}
			if got := outcomes(rs); !slices.Equal(got, []inbox.Outcome{inbox.Applied, inbox.Duplicate}) {
				t.Errorf("Apply(a, a) = %v, want applied, duplicate", got)
			}
			if !commit {
				return errRollback
			}
			return nil
		})
		if commit != (err == nil) {
			t.Fatalf("InTx (commit %v) = %v", commit, err)
		}
	}
	if got := e.offsets("g", "t"); got[0] != 1 {
		t.Errorf("Offsets after the committed Apply = %v, want 0: 1", got)
	}
	if got := e.seqs("k"); got["k"] != 1 {
		t.Errorf("KeySeqs(k) after the committed Apply = %v, want 1", got)
	}
	wantAnswers(t, "Record(a)", e.probe("a"), []bool{false})
}
