package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/inbox"
)

func txCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{"RollbackRecordsNothing", rollbackRecordsNothing[Tx]},
		{"PanicRollsBackAndIsReraised", panicRollsBack[Tx]},
		{"ContextErrorsPassThrough", contextErrorsPassThrough[Tx]},
	}
}

// writeAll records "r", sets key "rk" and saves an offset in tx.
func writeAll[Tx any](ctx context.Context, s inbox.Store[Tx], tx Tx) error {
	if _, err := s.Record(ctx, tx, []string{"r"}); err != nil {
		return err
	}
	if err := s.SetKeySeqs(ctx, tx, map[string]int64{"rk": 3}); err != nil {
		return err
	}
	return s.SaveOffsets(ctx, tx, []inbox.Offset{{Group: "g", Topic: "t", Partition: 0, Next: 10}})
}

// wantNothing checks that what writeAll wrote is not there.
func (e *env[Tx]) wantNothing(after string) {
	e.t.Helper()
	wantAnswers(e.t, "Record(r) after "+after, e.probe("r"), []bool{true})
	if got := e.seqs("rk"); len(got) != 0 {
		e.t.Errorf("KeySeqs(rk) after %s = %v, want the key absent", after, got)
	}
	if got := e.offsets("g", "t"); len(got) != 0 {
		e.t.Errorf("Offsets(g, t) after %s = %v, want none", after, got)
	}
}

func rollbackRecordsNothing[Tx any](t *testing.T, e *env[Tx]) {
	errAbort := errors.New("abort")
	err := e.s.InTx(e.ctx(), func(ctx context.Context, tx Tx) error {
		if err := writeAll(ctx, e.s, tx); err != nil {
			return err
		}
		return errAbort
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	e.wantNothing("a rolled-back transaction that recorded r, set rk and saved an offset")
}

func panicRollsBack[Tx any](t *testing.T, e *env[Tx]) {
	type boom struct{ n int }
	var got any
	func() {
		defer func() { got = recover() }()
		_ = e.s.InTx(e.ctx(), func(ctx context.Context, tx Tx) error {
			if err := writeAll(ctx, e.s, tx); err != nil {
				return err
			}
			panic(boom{7})
		})
	}()
	if got != (boom{7}) {
		t.Fatalf("InTx with fn panicking boom{7}: recovered %v, want the panic re-raised with its value", got)
	}
	e.wantNothing("a transaction whose fn panicked")
	wantAnswers(t, "Record(r) in a new transaction after the panic", e.record("r"), []bool{true})
}

func concurrentCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{"SameIDExactlyOneApplies", sameIDExactlyOneApplies[Tx]},
		{"DifferentIDsAllApplied", differentIDsAllApplied[Tx]},
		{"RolledBackRecordFreesID", rolledBackRecordFreesID[Tx]},
	}
}

// watchdog fails t if wg does not finish within caseTimeout.
func watchdog(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(caseTimeout):
		t.Fatalf("watchdog: %s did not finish in %v (a deadlock, or a store that waits forever)", what, caseTimeout)
	}
}

// sameIDExactlyOneApplies: rounds of goroutines handling the same ID at
// once through Inbox.Handle (which retries conflicts): exactly one
// applies, the others see a duplicate.
func sameIDExactlyOneApplies[Tx any](t *testing.T, e *env[Tx]) {
	const goroutines, rounds = 8, 5
	ib := e.inbox(inbox.Options{})
	ctx := e.ctx()
	for r := range rounds {
		id := fmt.Sprintf("same-%d", r)
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			outcomes  = map[inbox.Outcome]int{}
			errs      []error
			start     = make(chan struct{})
			committed int
		)
		for range goroutines {
			wg.Go(func() {
				<-start
				res, err := ib.Handle(ctx, inbox.Message{ID: id}, func(context.Context, Tx, inbox.Message) error { return nil })
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				outcomes[res.Outcome]++
				if res.Outcome == inbox.Applied {
					committed++
				}
			})
		}
		close(start)
		watchdog(t, &wg, fmt.Sprintf("%d concurrent Handle of %s", goroutines, id))
		if len(errs) > 0 {
			t.Fatalf("round %d: Handle of the same ID on %d goroutines: errors %v", r, goroutines, errs)
		}
		if committed != 1 || outcomes[inbox.Duplicate] != goroutines-1 {
			t.Fatalf("round %d: %d goroutines handling %s at once: %d applied, %d duplicates; want exactly 1 applied and %d duplicates",
				r, goroutines, id, committed, outcomes[inbox.Duplicate], goroutines-1)
		}
	}
}

// differentIDsAllApplied: goroutines handling different IDs at once all
// apply, and every ID is recorded.
func differentIDsAllApplied[Tx any](t *testing.T, e *env[Tx]) {
	const goroutines, each = 6, 10
	ib := e.inbox(inbox.Options{})
	ctx := e.ctx()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range each {
				id := fmt.Sprintf("g%d-%d", g, i)
				res, err := ib.Handle(ctx, inbox.Message{ID: id}, func(context.Context, Tx, inbox.Message) error { return nil })
				if err == nil && res.Outcome != inbox.Applied {
					err = fmt.Errorf("Handle(%s) = %v, want applied: no other handler had it", id, res.Outcome)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	close(start)
	watchdog(t, &wg, "concurrent Handle of different IDs")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var ids []string
	for g := range goroutines {
		for i := range each {
			ids = append(ids, fmt.Sprintf("g%d-%d", g, i))
		}
	}
	wantAnswers(t, "Record of every ID handled", e.probe(ids...), all(len(ids), false))
}

// rolledBackRecordFreesID: while a transaction holds an uncommitted
// record of an ID, another handles the same ID; the first rolls back: the
// second applies it (it must not take the uncommitted record for a
// committed one, or the message is lost).
func rolledBackRecordFreesID[Tx any](t *testing.T, e *env[Tx]) {
	ib := e.inbox(inbox.Options{})
	ctx := e.ctx()
	ready, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	errAbort := errors.New("abort")
	first := make(chan error, 1)
	go func() {
		first <- e.s.InTx(ctx, func(ctx context.Context, tx Tx) error {
			if _, err := e.s.Record(ctx, tx, []string{"x"}); err != nil {
				return err
			}
			close(ready)
			<-release
			return errAbort
		})
	}()
	select {
	case <-ready:
	case err := <-first:
		t.Fatalf("the first transaction failed: %v", err)
	}
	type answer struct {
		r   inbox.Result
		err error
	}
	second := make(chan answer, 1)
	go func() {
		r, err := ib.Handle(ctx, inbox.Message{ID: "x"}, func(context.Context, Tx, inbox.Message) error { return nil })
		second <- answer{r, err}
	}()
	// Let the second reach its Record (a SQL store makes it wait there);
	// the outcome must not depend on whether it did.
	time.Sleep(50 * time.Millisecond)
	unblock()
	if err := <-first; !errors.Is(err, errAbort) {
		t.Fatalf("the first transaction = %v, want its rollback", err)
	}
	select {
	case a := <-second:
		if a.err != nil || a.r.Outcome != inbox.Applied {
			t.Fatalf("Handle(x) while another transaction recorded x and then rolled back = %v, %v; want applied (the other record never committed)", a.r.Outcome, a.err)
		}
	case <-time.After(caseTimeout):
		t.Fatalf("watchdog: Handle(x) did not return in %v after the transaction holding x rolled back", caseTimeout)
	}
	wantAnswers(t, "Record(x) after", e.probe("x"), []bool{false})
}

// contextErrorsPassThrough: with its context ended, each method fails
// with an error errors.Is finds the context's error in, and Retryable is
// false for it (and for nil); a transaction whose context ends inside it
// commits nothing.
func contextErrorsPassThrough[Tx any](t *testing.T, e *env[Tx]) {
	ctx, cancel := context.WithCancel(e.t.Context())
	cancel()
	if err := e.s.InTx(ctx, func(context.Context, Tx) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("InTx with an ended context = %v, want context.Canceled", err)
	}
	if _, err := e.s.Offsets(ctx, "g", "t"); !errors.Is(err, context.Canceled) {
		t.Errorf("Offsets with an ended context = %v, want context.Canceled", err)
	}
	if _, _, err := e.s.Purge(ctx, time.Now(), 10); !errors.Is(err, context.Canceled) {
		t.Errorf("Purge with an ended context = %v, want context.Canceled", err)
	}
	for _, err := range []error{nil, context.Canceled, context.DeadlineExceeded} {
		if e.s.Retryable(err) {
			t.Errorf("Retryable(%v) = true, want false", err)
		}
	}
	inner, cancelInner := context.WithCancel(e.t.Context())
	defer cancelInner()
	err := e.s.InTx(inner, func(ctx context.Context, tx Tx) error {
		if _, err := e.s.Record(ctx, tx, []string{"c"}); err != nil {
			return err
		}
		cancelInner()
		_, err := e.s.Record(ctx, tx, []string{"d"})
		return err
	})
	if err == nil {
		t.Errorf("InTx whose context ended inside it = nil, want an error")
	}
	if e.s.Retryable(err) {
		t.Errorf("Retryable(%v) = true for a transaction whose context ended, want false", err)
	}
	wantAnswers(t, "Record(c, d) after the transaction whose context ended", e.probe("c", "d"), []bool{true, true})
}
