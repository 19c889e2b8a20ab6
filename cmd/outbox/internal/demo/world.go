package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox"
)

// abort prints where the run stood and returns why it ended.
func (w *world) abort(runCtx context.Context, c *DemoCmd, out io.Writer, db *demoBackend, logs *relayLog, parked int64) error {
	cause := context.Cause(runCtx)
	var in interruption
	switch {
	case errors.As(cause, &in):
		what := ""
		if db.what != "" {
			what = " and removing " + db.what + " (a second signal quits at once and leaves them behind)"
		}
		fmt.Fprintf(out, "\n%v: stopping the relays%s\n", in, what)
		fmt.Fprintf(out, "  %s\n", w.progress(parked))
		return in
	case errors.Is(cause, errDemoTimeout):
		msg := fmt.Sprintf("demo: timed out after %v (raise --timeout): %s", c.Timeout, w.progress(parked))
		if last := logs.lastError(); last != "" {
			msg += "; the relays last reported: " + last
		}
		return errors.New(msg)
	}
	return cause
}

// world is what the demo appended and what arrived, checked against the
// plan.
//
// Two locks: appending serializes the appending transactions and is held
// across each commit, so per key the plan's sequence order is commit
// order; mu guards the bookkeeping and is held only for it, never across
// a round trip to the store. The consumer and the sink take mu once per
// record: were it held across commits, they would wait for one commit per
// record, and on a store whose commits take milliseconds (PostgreSQL)
// arrivals would trail the appends until the last one and the handover
// would come at the end instead of halfway.
type world struct {
	plan *demoPlan

	appending sync.Mutex

	mu         sync.Mutex
	nextTx     int       // the plan's next transaction; written under appending and mu
	txOf       []txState // by entry index: where its transaction stands
	arrivals   []int     // by entry index: how many times it arrived
	lastSeq    map[string]int
	violations []string
	failedAt   map[[2]int]bool // injected failures seen: (entry, attempt)

	appended, rolledBack atomic.Int64 // entries
	appendedTxs, rbTxs   atomic.Int64 // transactions
	arrived              atomic.Int64 // first arrivals
	attempts, injected   atomic.Int64 // publish attempts, failures injected
	unknown              atomic.Int64 // records with an ID not in the plan
}

// txState is where the transaction of a committing entry stands.
type txState uint8

const (
	txPlanned    txState = iota // not begun: its entries cannot have been published
	txCommitting                // begun; the relays may see it as soon as the store commits it
	txCommitted                 // the store confirmed the commit
)

func newWorld(p *demoPlan) *world {
	return &world{
		plan:     p,
		txOf:     make([]txState, len(p.entries)),
		arrivals: make([]int, len(p.entries)),
		lastSeq:  map[string]int{},
		failedAt: map[[2]int]bool{},
	}
}

func (w *world) appendedAll() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nextTx == len(w.plan.txs)
}

// appendLoop appends the plan's transactions in plan order until none is
// left. The pause between transactions spreads the appends over the run.
func (w *world) appendLoop(ctx context.Context, appendTx func(context.Context, []outbox.Entry, bool) error, g int) error {
	pace := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
	for ctx.Err() == nil {
		done, err := w.appendNext(ctx, appendTx, g)
		switch {
		case done:
			return nil
		case err != nil && ctx.Err() != nil:
			return nil // the run ended; its cause is reported
		case err != nil:
			return err
		}
		time.Sleep(time.Duration(pace.IntN(300)) * time.Microsecond)
	}
	return nil
}

// appendNext appends the plan's next transaction, as appender g, and
// records the outcome; done reports that none was left. It holds
// w.appending throughout, so transactions commit in plan order.
func (w *world) appendNext(ctx context.Context, appendTx func(context.Context, []outbox.Entry, bool) error, g int) (done bool, err error) {
	w.appending.Lock()
	defer w.appending.Unlock()
	tx, entries, ok := w.beginTx(g)
	if !ok {
		return true, nil
	}
	err = appendTx(ctx, entries, tx.rollback)
	if err == nil {
		w.commitTx(tx)
	}
	// On an error the transaction's entries stay txCommitting: whether
	// the store committed it is unknown, and the run ends.
	return false, err
}

// beginTx returns the plan's next transaction and its entries as appender
// g writes them, and marks a committing one's entries txCommitting; ok is
// false when none is left. The caller holds w.appending.
func (w *world) beginTx(g int) (tx demoTx, entries []outbox.Entry, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.nextTx == len(w.plan.txs) {
		return demoTx{}, nil, false
	}
	tx = w.plan.txs[w.nextTx]
	entries = make([]outbox.Entry, tx.n)
	for i := range entries {
		e := w.plan.entries[tx.first+i]
		entries[i] = outbox.Entry{
			ID:      e.id,
			Topic:   demoTopic,
			Key:     e.key,
			Payload: fmt.Appendf(nil, `{"order":%q,"seq":%d,"writer":%d}`, e.key, e.seq, g),
			Headers: map[string]string{"content-type": "application/json"},
		}
		if !tx.rollback {
			w.txOf[tx.first+i] = txCommitting
		}
	}
	return tx, entries, true
}

// commitTx records that tx committed (or, for a rollback, rolled back)
// and moves on to the next one. The caller holds w.appending.
func (w *world) commitTx(tx demoTx) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextTx++
	if tx.rollback {
		w.rolledBack.Add(int64(tx.n))
		w.rbTxs.Add(1)
		return
	}
	for i := range tx.n {
		w.txOf[tx.first+i] = txCommitted
	}
	w.appended.Add(int64(tx.n))
	w.appendedTxs.Add(1)
}

// arrive records a message of the demo's topic read back from the broker,
// with its entry ID and key, in the order the broker keeps: a duplicate is
// counted, a first arrival checked against the plan (its transaction
// committed, not a rolled-back or poison entry, its key's sequence after
// the last one seen).
func (w *world) arrive(id, key string) {
	i, ok := w.plan.byID[id]
	w.mu.Lock()
	defer w.mu.Unlock()
	if !ok {
		w.unknown.Add(1)
		w.violations = append(w.violations, fmt.Sprintf("a message with unknown entry ID %q arrived", id))
		return
	}
	w.arrivals[i]++
	if w.arrivals[i] > 1 {
		return // a duplicate: consumers dedupe by the entry ID
	}
	e := w.plan.entries[i]
	switch {
	case e.rollback:
		w.violations = append(w.violations, "entry "+id+" of a rolled-back transaction arrived")
	case w.txOf[i] == txPlanned:
		w.violations = append(w.violations, "entry "+id+" arrived before its transaction began")
	case e.poison || e.failures == demoMaxAttempts:
		w.violations = append(w.violations, "entry "+id+" arrived although the broker refused every attempt")
	case key != e.key:
		w.violations = append(w.violations, fmt.Sprintf("entry %s arrived with key %q, want %q", id, key, e.key))
	default:
		if last, seen := w.lastSeq[e.key]; seen && e.seq < last {
			w.violations = append(w.violations, fmt.Sprintf("key %s: seq %d arrived after seq %d", e.key, e.seq, last))
		}
		w.lastSeq[e.key] = e.seq
		w.arrived.Add(1)
	}
}

// progress is the progress line; parked is the relays' parked count.
func (w *world) progress(parked int64) string {
	p := w.plan
	return fmt.Sprintf("appended %d/%d, arrived %d/%d, parked %d/%d, publish attempts %d (%d failed on purpose)",
		w.appended.Load(), p.committed, w.arrived.Load(), p.arrivals(), parked, p.parked(), w.attempts.Load(), w.injected.Load())
}

// report prints the summary and checks every count against the plan.
func (w *world) report(ctx context.Context, out io.Writer, db *demoBackend, broker string, s outbox.RelayStats, handover string, took time.Duration) error {
	parked, err := listParked(ctx, db.inspector)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tally(parked)
	w.printSummary(out, broker, t, s, handover, took)
	if problems := w.problems(t, s); len(problems) > 0 {
		fmt.Fprintln(out, "FAILED")
		return errors.New("demo: " + strings.Join(problems, "; "))
	}
	fmt.Fprintln(out, "OK: every committed entry was delivered or parked as planned, in per-key order; nothing rolled back was published")
	return nil
}

// listParked lists every parked entry.
func listParked(ctx context.Context, in outbox.Inspector) ([]outbox.Entry, error) {
	var parked []outbox.Entry
	for after := ""; ; {
		page, err := in.Parked(ctx, after, 500)
		if err != nil {
			return nil, fmt.Errorf("demo: listing the parked entries: %w", err)
		}
		parked = append(parked, page...)
		if len(page) < 500 {
			return parked, nil
		}
		after = page[len(page)-1].ID
	}
}

// tally is what the run did, counted for the report.
type tally struct {
	parked                         int // entries parked in the store
	poison, exhausted, otherParked int // of those: planned poison, out of attempts, not planned
	duplicates, lost               int
	distinctFailures               int // injected failures by (entry, attempt)
}

// tally counts the parked entries by why the plan parks them, and the
// arrivals; the caller holds w.mu.
func (w *world) tally(parked []outbox.Entry) tally {
	p := w.plan
	t := tally{parked: len(parked), distinctFailures: len(w.failedAt)}
	isParked := map[int]bool{}
	for _, e := range parked {
		i, ok := p.byID[e.ID]
		switch {
		case !ok || p.entries[i].rollback:
			t.otherParked++
		case p.entries[i].poison:
			t.poison++
		case p.entries[i].failures == demoMaxAttempts:
			t.exhausted++
		default:
			t.otherParked++
		}
		if ok {
			isParked[i] = true
		}
	}
	for i, e := range p.entries {
		switch n := w.arrivals[i]; {
		case n == 0 && !e.rollback && !isParked[i]:
			t.lost++
		case n > 1:
			t.duplicates += n - 1
		}
	}
	return t
}

// printSummary prints the report's lines; the caller holds w.mu.
func (w *world) printSummary(out io.Writer, broker string, t tally, s outbox.RelayStats, handover string, took time.Duration) {
	p := w.plan
	fmt.Fprintf(out, "\nappended   %d entries in %d transactions over %d keys; %d transactions (%d entries) rolled back\n",
		w.appended.Load(), w.appendedTxs.Load(), p.keys, w.rbTxs.Load(), w.rolledBack.Load())
	fmt.Fprintf(out, "published  %d entries acknowledged by %s and marked sent by the relays; %d arrived, plus %d duplicates (consumers dedupe by the outbox-id header)\n",
		s.Published, broker, w.arrived.Load(), t.duplicates)
	fmt.Fprintf(out, "failed     %d publish attempts failed on purpose (%d distinct by entry and attempt); the relays retried %d with backoff\n",
		w.injected.Load(), t.distinctFailures, s.Retried)
	parkedLine := fmt.Sprintf("parked     %d entries: %d poison", t.parked, t.poison)
	if t.exhausted > 0 || p.exhausted > 0 {
		parkedLine += fmt.Sprintf(", %d out of attempts", t.exhausted)
	}
	if t.otherParked > 0 {
		parkedLine += fmt.Sprintf(", %d not planned", t.otherParked)
	}
	fmt.Fprintln(out, parkedLine)
	if handover != "" {
		fmt.Fprintf(out, "handover   %s\n", handover)
	}
	fmt.Fprintf(out, "order      per-key order checked over %d keys: %d violations\n", len(w.lastSeq), len(w.violations))
	fmt.Fprintf(out, "lost       %d\n", t.lost)
	fmt.Fprintf(out, "took       %v\n", took.Round(time.Millisecond))
}

// problems checks every count against the plan; the caller holds w.mu.
func (w *world) problems(t tally, s outbox.RelayStats) []string {
	p := w.plan
	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if t.lost > 0 {
		problem("%d committed entries neither arrived nor were parked", t.lost)
	}
	if n := w.appended.Load(); n != int64(p.committed) || w.rolledBack.Load() != int64(p.rolledBack) {
		problem("appended %d and rolled back %d entries; the plan says %d and %d", n, w.rolledBack.Load(), p.committed, p.rolledBack)
	}
	if n := w.arrived.Load(); n != int64(p.arrivals()) {
		problem("%d entries arrived; the plan delivers %d", n, p.arrivals())
	}
	if t.poison != p.poison || t.exhausted != p.exhausted || t.otherParked > 0 {
		problem("parked %d poison and %d out-of-attempts entries and %d others; the plan parks %d poison and %d out-of-attempts entries",
			t.poison, t.exhausted, t.otherParked, p.poison, p.exhausted)
	}
	if s.Parked != int64(t.parked) {
		problem("the relays counted %d parked entries, the store holds %d", s.Parked, t.parked)
	}
	if t.distinctFailures != p.failures {
		problem("%d distinct publish attempts failed on purpose; the plan fails %d", t.distinctFailures, p.failures)
	}
	for i, v := range w.violations {
		if i == 5 {
			problem("... and %d more", len(w.violations)-5)
			break
		}
		problem("%s", v)
	}
	return problems
}
