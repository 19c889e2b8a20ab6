package inbox_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

var quiet = slog.New(slog.DiscardHandler)

// newInbox is an Inbox over store with opts, quiet unless opts has a
// logger, reporting to no meter unless opts has one.
func newInbox[Tx any](t *testing.T, store inbox.Store[Tx], opts inbox.Options) *inbox.Inbox[Tx] {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = noop.NewMeterProvider()
	}
	ib, err := inbox.New(store, opts)
	if err != nil {
		t.Fatalf("inbox.New: %v", err)
	}
	return ib
}

// recorder is a handler that notes the IDs it applied, on commit.
type recorder struct {
	mu      sync.Mutex
	applied []string
	calls   int
}

func (r *recorder) handle(_ context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	tx.OnCommit(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.applied = append(r.applied, m.ID)
	})
	return nil
}

func (r *recorder) got() (applied []string, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied), r.calls
}

func handle(t *testing.T, ib *inbox.Inbox[*inbox.MemoryTx], h inbox.Handler[*inbox.MemoryTx], msgs ...inbox.Message) []inbox.Result {
	t.Helper()
	rs, err := ib.HandleBatch(t.Context(), msgs, h)
	if err != nil {
		t.Fatalf("HandleBatch: %v", err)
	}
	return rs
}

func seqOf(t *testing.T, s *inbox.Memory, key string) (int64, bool) {
	t.Helper()
	var n int64
	var ok bool
	err := s.InTx(t.Context(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		got, err := s.KeySeqs(ctx, tx, []string{key})
		n, ok = got[key]
		return err
	})
	if err != nil {
		t.Fatalf("KeySeqs: %v", err)
	}
	return n, ok
}

func TestGapApplyReportsAndApplies(t *testing.T) {
	t.Parallel()
	logs := &testenv.LogCapture{}
	s := inbox.NewMemory()
	ib := newInbox(t, s, inbox.Options{Logger: slog.New(logs)})
	var rec recorder
	rs := handle(t, ib, rec.handle,
		inbox.Message{ID: "a1", Key: "a", Seq: 1},
		inbox.Message{ID: "a5", Key: "a", Seq: 5},
		inbox.Message{ID: "a3", Key: "a", Seq: 3},
		inbox.Message{ID: "b4", Key: "b", Seq: 4},
		inbox.Message{ID: "c0", Key: "c"},
		inbox.Message{ID: "s7", Seq: 7},
	)
	want := []inbox.Result{
		{Outcome: inbox.Applied},
		{Outcome: inbox.Applied, Gap: &inbox.Gap{Key: "a", From: 2, To: 4}},
		{Outcome: inbox.Applied, Late: true},
		{Outcome: inbox.Applied, First: true},
		{Outcome: inbox.Applied},
		{Outcome: inbox.Applied},
	}
	for i := range want {
		if !sameResult(rs[i], want[i]) {
			t.Errorf("result %d = %+v, want %+v", i, rs[i], want[i])
		}
	}
	if applied, _ := rec.got(); len(applied) != 6 {
		t.Errorf("applied %v, want all 6", applied)
	}
	if n, _ := seqOf(t, s, "a"); n != 5 {
		t.Errorf("key a's number = %d, want 5 (a late message leaves it)", n)
	}
	if _, ok := seqOf(t, s, "c"); ok {
		t.Error("key c has a number, though its message had none")
	}
	gaps := logs.Attrs(slog.LevelWarn, func(msg string) bool {
		return msg == "inbox: sequence gap: the consumer did not see these numbers of the key before this message"
	})
	if len(gaps) != 1 || gaps[0]["id"] != "a5" || gaps[0]["key"] != "a" || gaps[0]["missing_from"] != "2" || gaps[0]["missing_to"] != "4" || gaps[0]["missing"] != "3" {
		t.Errorf("gap log lines = %v, want one for a5: key a, 2..4, 3 missing\n%s", gaps, logs)
	}
	if got := (inbox.Gap{From: 2, To: 4}).Missing(); got != 3 {
		t.Errorf("Gap{2, 4}.Missing() = %d, want 3", got)
	}
}

func sameResult(a, b inbox.Result) bool {
	if a.Outcome != b.Outcome || a.Late != b.Late || a.First != b.First || (a.Gap == nil) != (b.Gap == nil) {
		return false
	}
	return a.Gap == nil || *a.Gap == *b.Gap
}

func TestGapFailAppliesNothing(t *testing.T) {
	t.Parallel()
	s := inbox.NewMemory()
	ib := newInbox(t, s, inbox.Options{Gaps: inbox.GapFail})
	var rec recorder
	handle(t, ib, rec.handle, inbox.Message{ID: "k1", Key: "k", Seq: 1})
	off := &inbox.Offset{Group: "g", Topic: "t", Next: 9}
	_, err := ib.HandleBatch(t.Context(), []inbox.Message{
		{ID: "x", Key: "other", Seq: 1, Offset: off},
		{ID: "k3", Key: "k", Seq: 3},
	}, rec.handle)
	var ge *inbox.GapError
	if !errors.As(err, &ge) || !errors.Is(err, inbox.ErrGap) {
		t.Fatalf("HandleBatch with a gap under GapFail = %v, want a *GapError wrapping ErrGap", err)
	}
	if ge.ID != "k3" || ge.Gap != (inbox.Gap{Key: "k", From: 2, To: 2}) {
		t.Errorf("GapError = %+v, want k3's gap 2..2 of k", ge)
	}
	if applied, _ := rec.got(); !slices.Equal(applied, []string{"k1"}) {
		t.Errorf("applied %v, want only k1: nothing of the failed batch", applied)
	}
	if n, _ := seqOf(t, s, "k"); n != 1 {
		t.Errorf("key k = %d, want 1", n)
	}
	if offs, _ := s.Offsets(t.Context(), "g", "t"); len(offs) != 0 {
		t.Errorf("offsets after the failed batch = %v, want none", offs)
	}
	// Apply in the caller's transaction gives the same error.
	err = s.InTx(t.Context(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		_, err := ib.Apply(ctx, tx, []inbox.Message{{ID: "k3", Key: "k", Seq: 3}}, rec.handle)
		return err
	})
	if !errors.As(err, &ge) {
		t.Fatalf("Apply with a gap under GapFail = %v, want a *GapError", err)
	}
}

// TestGapHoldAppliesWhenTheMissingArrives: a message held for a gap is
// applied in order once another goroutine applies the missing one.
func TestGapHoldAppliesWhenTheMissingArrives(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := inbox.NewMemory()
		ib := newInbox(t, s, inbox.Options{Gaps: inbox.GapHold, GapHold: time.Hour, GapRetry: time.Second})
		var rec recorder
		handle(t, ib, rec.handle, inbox.Message{ID: "k1", Key: "k", Seq: 1})
		start := time.Now()
		type answer struct {
			r   inbox.Result
			err error
			at  time.Duration
		}
		held := make(chan answer, 1)
		go func() {
			r, err := ib.Handle(t.Context(), inbox.Message{ID: "k3", Key: "k", Seq: 3}, rec.handle)
			held <- answer{r, err, time.Since(start)}
		}()
		synctest.Wait() // k3 is held, sleeping until its next try
		if applied, _ := rec.got(); !slices.Equal(applied, []string{"k1"}) {
			t.Fatalf("applied %v while k3 is held, want [k1]", applied)
		}
		time.Sleep(10 * time.Second)
		handle(t, ib, rec.handle, inbox.Message{ID: "k2", Key: "k", Seq: 2})
		a := <-held
		if a.err != nil || a.r.Outcome != inbox.Applied || a.r.Gap != nil {
			t.Fatalf("held Handle(k3) = %+v, %v; want applied in order, without a gap", a.r, a.err)
		}
		if a.at > 11*time.Second {
			t.Errorf("k3 was applied %v after it arrived, want at the first try after k2 (GapRetry 1s)", a.at)
		}
		if applied, calls := rec.got(); !slices.Equal(applied, []string{"k1", "k2", "k3"}) || calls != 3 {
			t.Errorf("applied %v in %d handler calls, want [k1 k2 k3] in 3 (a held message's handler does not run)", applied, calls)
		}
		if n, _ := seqOf(t, s, "k"); n != 3 {
			t.Errorf("key k = %d, want 3", n)
		}
	})
}

// TestGapHoldAppliesAfterTheHold: with the missing message never coming,
// a held message is applied, with its gap, once GapHold has passed.
func TestGapHoldAppliesAfterTheHold(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		logs := &testenv.LogCapture{}
		s := inbox.NewMemory()
		ib := newInbox(t, s, inbox.Options{Gaps: inbox.GapHold, GapHold: 30 * time.Second, GapRetry: time.Second, Logger: slog.New(logs)})
		var rec recorder
		handle(t, ib, rec.handle, inbox.Message{ID: "k1", Key: "k", Seq: 1})
		start := time.Now()
		r, err := ib.Handle(t.Context(), inbox.Message{ID: "k4", Key: "k", Seq: 4}, rec.handle)
		if err != nil || r.Outcome != inbox.Applied || r.Gap == nil || *r.Gap != (inbox.Gap{Key: "k", From: 2, To: 3}) {
			t.Fatalf("Handle(k4) held for its gap = %+v, %v; want applied with the gap 2..3", r, err)
		}
		if d := time.Since(start); d < 30*time.Second || d > 31*time.Second {
			t.Errorf("k4 applied after %v, want after GapHold (30s), at the next try", d)
		}
		if len(logs.Attrs(slog.LevelWarn, func(string) bool { return true })) < 2 {
			t.Errorf("want a warning for the hold running out and one for the gap:\n%s", logs)
		}
		// Inside a caller's transaction GapHold cannot wait.
		err = s.InTx(t.Context(), func(ctx context.Context, tx *inbox.MemoryTx) error {
			_, err := ib.Apply(ctx, tx, []inbox.Message{{ID: "k9", Key: "k", Seq: 9}}, rec.handle)
			return err
		})
		var ge *inbox.GapError
		if !errors.As(err, &ge) || ge.Gap != (inbox.Gap{Key: "k", From: 5, To: 8}) {
			t.Fatalf("Apply(k9) under GapHold = %v, want a *GapError for 5..8", err)
		}
		// A context ending during the hold ends the wait.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if _, err := ib.Handle(ctx, inbox.Message{ID: "k9", Key: "k", Seq: 9}, rec.handle); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Handle(k9) held past its context's deadline = %v, want context.DeadlineExceeded", err)
		}
	})
}

// conflicting is a Memory whose first commits fail with a retryable
// conflict.
type conflicting struct {
	*inbox.Memory
	mu    sync.Mutex
	fails int
	tries int
}

var errConflict = errors.New("conflict")

func (c *conflicting) InTx(ctx context.Context, fn func(context.Context, *inbox.MemoryTx) error) error {
	return c.Memory.InTx(ctx, func(ctx context.Context, tx *inbox.MemoryTx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.tries++
		if c.fails > 0 {
			c.fails--
			return errConflict
		}
		return nil
	})
}

func (c *conflicting) Retryable(err error) bool { return errors.Is(err, errConflict) }

func TestRetriesConflicts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &conflicting{Memory: inbox.NewMemory(), fails: 4}
		ib := newInbox(t, s, inbox.Options{})
		var rec recorder
		r, err := ib.Handle(t.Context(), inbox.Message{ID: "m"}, rec.handle)
		if err != nil || r.Outcome != inbox.Applied {
			t.Fatalf("Handle after 4 conflicts = %+v, %v; want applied at the 5th try", r, err)
		}
		if applied, calls := rec.got(); !slices.Equal(applied, []string{"m"}) || calls != 5 || s.tries != 5 {
			t.Errorf("applied %v, %d handler calls in %d tries; want [m], 5 and 5", applied, calls, s.tries)
		}
	})
}

// TestRetriesHandlerConflicts: a handler whose effect fails with a
// conflict the store calls retryable (a deadlock of the effect's INSERT)
// runs again in a new transaction.
func TestRetriesHandlerConflicts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &conflicting{Memory: inbox.NewMemory()}
		ib := newInbox(t, s, inbox.Options{})
		var rec recorder
		calls := 0
		r, err := ib.Handle(t.Context(), inbox.Message{ID: "m"}, func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
			if calls++; calls < 3 {
				return errConflict
			}
			return rec.handle(ctx, tx, m)
		})
		if err != nil || r.Outcome != inbox.Applied || calls != 3 {
			t.Fatalf("Handle with a handler conflicting twice = %+v, %v after %d calls; want applied at the 3rd", r, err, calls)
		}
		if applied, _ := rec.got(); !slices.Equal(applied, []string{"m"}) {
			t.Errorf("applied %v, want [m] once", applied)
		}
	})
}

func TestMaxAttemptsRespected(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct{ max, tries int }{{1, 1}, {3, 3}, {0, 10}} {
			s := &conflicting{Memory: inbox.NewMemory(), fails: 100}
			ib := newInbox(t, s, inbox.Options{MaxAttempts: c.max})
			var rec recorder
			_, err := ib.Handle(t.Context(), inbox.Message{ID: "m"}, rec.handle)
			if !errors.Is(err, errConflict) {
				t.Errorf("MaxAttempts %d: Handle = %v, want the conflict", c.max, err)
			}
			if applied, _ := rec.got(); s.tries != c.tries || len(applied) != 0 {
				t.Errorf("MaxAttempts %d: %d tries, applied %v; want %d tries, nothing applied", c.max, s.tries, applied, c.tries)
			}
		}
		// A non-retryable error is not tried again.
		s := &conflicting{Memory: inbox.NewMemory()}
		ib := newInbox(t, s, inbox.Options{})
		errOther := errors.New("other")
		_, err := ib.Handle(t.Context(), inbox.Message{ID: "m"}, func(context.Context, *inbox.MemoryTx, inbox.Message) error { return errOther })
		if !errors.Is(err, errOther) || s.tries != 0 {
			t.Errorf("Handle with a handler error = %v after %d commits tried, want the error at once", err, s.tries)
		}
	})
}

func TestHandlerErrorRollsBackAndIsWrapped(t *testing.T) {
	t.Parallel()
	s := inbox.NewMemory()
	ib := newInbox(t, s, inbox.Options{})
	errEffect := errors.New("effect failed")
	var rec recorder
	_, err := ib.HandleBatch(t.Context(), []inbox.Message{
		{ID: "ok", Key: "k", Seq: 1, Offset: &inbox.Offset{Group: "g", Topic: "t", Next: 1}},
		{ID: "bad"},
	}, func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		if m.ID == "bad" {
			return errEffect
		}
		return rec.handle(ctx, tx, m)
	})
	if !errors.Is(err, errEffect) || err.Error() != `inbox: handler of message "bad": effect failed` {
		t.Fatalf("HandleBatch = %v, want the handler's error wrapped with the message ID", err)
	}
	if applied, _ := rec.got(); len(applied) != 0 {
		t.Errorf("applied %v, want nothing", applied)
	}
	rs := handle(t, ib, rec.handle, inbox.Message{ID: "ok"}, inbox.Message{ID: "bad"})
	if rs[0].Outcome != inbox.Applied || rs[1].Outcome != inbox.Applied {
		t.Errorf("the same messages again = %v, want both applied (the failed batch recorded nothing)", rs)
	}
	if _, ok := seqOf(t, s, "k"); ok {
		t.Error("key k has a number from the rolled-back batch")
	}
}

func TestOffsetsHighestPerPartition(t *testing.T) {
	t.Parallel()
	s := inbox.NewMemory()
	ib := newInbox(t, s, inbox.Options{})
	var rec recorder
	off := func(topic string, p int32, next int64) *inbox.Offset {
		return &inbox.Offset{Group: "g", Topic: topic, Partition: p, Next: next}
	}
	handle(t, ib, rec.handle, inbox.Message{ID: "d", Offset: off("t", 0, 1)})
	handle(t, ib, rec.handle,
		inbox.Message{ID: "a", Offset: off("t", 0, 5)},
		inbox.Message{ID: "b", Offset: off("t", 1, 3)},
		inbox.Message{ID: "d", Offset: off("t", 0, 7)}, // a duplicate still advances its partition
		inbox.Message{ID: "c", Offset: off("t", 0, 6)},
		inbox.Message{ID: "e", Offset: off("u", 0, 2)},
		inbox.Message{ID: "f"},
	)
	for topic, want := range map[string]map[int32]int64{"t": {0: 7, 1: 3}, "u": {0: 2}} {
		got, err := s.Offsets(t.Context(), "g", topic)
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("Offsets(g, %s) = %v, %v; want %v", topic, got, err, want)
		}
	}
	// A batch of duplicates only still stores its offsets.
	handle(t, ib, rec.handle, inbox.Message{ID: "a", Offset: off("t", 1, 9)})
	if got, _ := s.Offsets(t.Context(), "g", "t"); got[1] != 9 {
		t.Errorf("Offsets after a batch of duplicates = %v, want partition 1 at 9", got)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	s := inbox.NewMemory()
	ib := newInbox(t, s, inbox.Options{})
	var rec recorder
	for _, c := range []struct {
		name string
		msgs []inbox.Message
		h    inbox.Handler[*inbox.MemoryTx]
		want error
	}{
		{"NoHandler", []inbox.Message{{ID: "a"}}, nil, inbox.ErrInvalidArgument},
		{"NoID", []inbox.Message{{ID: "a"}, {Key: "k"}}, rec.handle, inbox.ErrInvalidMessage},
		{"NegativeSeq", []inbox.Message{{ID: "a", Key: "k", Seq: -1}}, rec.handle, inbox.ErrInvalidMessage},
		{"OffsetWithoutTopic", []inbox.Message{{ID: "a", Offset: &inbox.Offset{Group: "g", Next: 1}}}, rec.handle, inbox.ErrInvalidMessage},
		{"NegativeNext", []inbox.Message{{ID: "a", Offset: &inbox.Offset{Topic: "t", Next: -1}}}, rec.handle, inbox.ErrInvalidMessage},
	} {
		if _, err := ib.HandleBatch(t.Context(), c.msgs, c.h); !errors.Is(err, c.want) {
			t.Errorf("%s: HandleBatch = %v, want %v", c.name, err, c.want)
		}
		err := s.InTx(t.Context(), func(ctx context.Context, tx *inbox.MemoryTx) error {
			_, err := ib.Apply(ctx, tx, c.msgs, c.h)
			return err
		})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Apply = %v, want %v", c.name, err, c.want)
		}
	}
	if applied, calls := rec.got(); calls != 0 || len(applied) != 0 {
		t.Errorf("the handler ran %d times for invalid batches", calls)
	}
	if rs, err := ib.HandleBatch(t.Context(), nil, rec.handle); rs != nil || err != nil {
		t.Errorf("HandleBatch(no messages) = %v, %v; want nil, nil", rs, err)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	s := inbox.NewMemory()
	if _, err := inbox.New[*inbox.MemoryTx](nil, inbox.Options{}); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Errorf("New(nil store) = %v, want ErrInvalidArgument", err)
	}
	for _, o := range []inbox.Options{
		{Gaps: inbox.GapFail + 1}, {Gaps: -1}, {GapHold: -time.Second}, {GapRetry: -1}, {MaxAttempts: -1},
	} {
		if _, err := inbox.New(s, o); !errors.Is(err, inbox.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want ErrInvalidArgument", o, err)
		}
	}
}

// TestApplyInCallersTransaction: Apply records in the caller's
// transaction, which decides: a rollback applies nothing.
func TestApplyInCallersTransaction(t *testing.T) {
	t.Parallel()
	s := inbox.NewMemory()
	ib := newInbox(t, s, inbox.Options{})
	var rec recorder
	errLater := errors.New("the caller's own work failed")
	err := s.InTx(t.Context(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		rs, err := ib.Apply(ctx, tx, []inbox.Message{{ID: "a"}}, rec.handle)
		if err != nil || rs[0].Outcome != inbox.Applied {
			t.Errorf("Apply = %v, %v", rs, err)
		}
		return errLater
	})
	if !errors.Is(err, errLater) {
		t.Fatalf("InTx = %v", err)
	}
	err = s.InTx(t.Context(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		rs, err := ib.Apply(ctx, tx, []inbox.Message{{ID: "a"}, {ID: "a"}}, rec.handle)
		if err != nil || rs[0].Outcome != inbox.Applied || rs[1].Outcome != inbox.Duplicate {
			t.Errorf("Apply(a, a) after the rollback = %v, %v; want applied, duplicate", rs, err)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if applied, _ := rec.got(); !slices.Equal(applied, []string{"a"}) {
		t.Errorf("applied %v, want [a]", applied)
	}
}

func TestOutcomeString(t *testing.T) {
	t.Parallel()
	for o, want := range map[inbox.Outcome]string{inbox.Applied: "applied", inbox.Duplicate: "duplicate", 7: "Outcome(7)"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, want)
		}
	}
	e := &inbox.GapError{ID: "m", Gap: inbox.Gap{Key: "k", From: 2, To: 3}}
	if got := e.Error(); got != `inbox: message "m" of key "k" skips sequence numbers 2..3 (2 missing); set Options.Gaps to GapApply to apply such messages` {
		t.Errorf("GapError.Error() = %q", got)
	}
}

// counting is a Memory that counts the store calls of its transactions.
type counting struct {
	*inbox.Memory
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) count(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[name]++
}

func (c *counting) KeySeqs(ctx context.Context, tx *inbox.MemoryTx, keys []string) (map[string]int64, error) {
	c.count("KeySeqs")
	return c.Memory.KeySeqs(ctx, tx, keys)
}

func (c *counting) SetKeySeqs(ctx context.Context, tx *inbox.MemoryTx, seqs map[string]int64) error {
	c.count("SetKeySeqs")
	return c.Memory.SetKeySeqs(ctx, tx, seqs)
}

func (c *counting) SaveOffsets(ctx context.Context, tx *inbox.MemoryTx, offs []inbox.Offset) error {
	c.count("SaveOffsets")
	return c.Memory.SaveOffsets(ctx, tx, offs)
}

func (c *counting) RecordWithKeySeqs(ctx context.Context, tx *inbox.MemoryTx, ids, keys []string) ([]bool, map[string]int64, error) {
	c.count("RecordWithKeySeqs")
	return c.Memory.RecordWithKeySeqs(ctx, tx, ids, keys)
}

func (c *counting) Finish(ctx context.Context, tx *inbox.MemoryTx, seqs map[string]int64, offs []inbox.Offset) error {
	c.count("Finish")
	return c.Memory.Finish(ctx, tx, seqs, offs)
}

func (c *counting) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int{}
	return out
}

// plain hides the optional interfaces of the store it wraps.
type plain struct{ inbox.Store[*inbox.MemoryTx] }

// TestRoundTrips: which store calls (beyond Record) a batch costs, with a
// plain store and with one that implements KeyRecorder and Finisher: none
// for what a batch lacks (numbered keys, offsets), and with the optional
// interfaces one before and one after the handlers.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	numbered := inbox.Message{ID: "c", Key: "k", Seq: 1, Offset: &inbox.Offset{Topic: "t", Next: 1}}
	for _, c := range []struct {
		name     string
		optional bool
		msgs     []inbox.Message
		want     map[string]int
	}{
		{"PlainUnnumbered", false, []inbox.Message{{ID: "a"}, {ID: "b", Key: "k"}}, map[string]int{}},
		{"PlainNumberedWithOffset", false, []inbox.Message{numbered}, map[string]int{"KeySeqs": 1, "SetKeySeqs": 1, "SaveOffsets": 1}},
		{"PlainDuplicate", false, []inbox.Message{{ID: "a", Key: "k", Seq: 1}}, map[string]int{}},
		{"OptionalUnnumbered", true, []inbox.Message{{ID: "a"}, {ID: "b", Key: "k"}}, map[string]int{}},
		{"OptionalNumberedWithOffset", true, []inbox.Message{numbered}, map[string]int{"RecordWithKeySeqs": 1, "Finish": 1}},
		{"OptionalOffsetOnly", true, []inbox.Message{{ID: "d", Offset: &inbox.Offset{Topic: "t", Next: 2}}}, map[string]int{"Finish": 1}},
		{"OptionalDuplicate", true, []inbox.Message{{ID: "a", Key: "k", Seq: 1}}, map[string]int{"RecordWithKeySeqs": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := &counting{Memory: inbox.NewMemory(), calls: map[string]int{}}
			var store inbox.Store[*inbox.MemoryTx] = s
			if !c.optional {
				store = plain{s}
			}
			ib := newInbox(t, store, inbox.Options{})
			var rec recorder
			handle(t, ib, rec.handle, inbox.Message{ID: "a"})
			s.take()
			rs := handle(t, ib, rec.handle, c.msgs...)
			if got := s.take(); !maps.Equal(got, c.want) {
				t.Errorf("store calls besides Record = %v, want %v", got, c.want)
			}
			if c.msgs[0].ID == "c" && (rs[0].Outcome != inbox.Applied || rs[0].First) {
				t.Errorf("result %+v, want applied", rs[0])
			}
		})
	}
}
