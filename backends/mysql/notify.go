package mysqloutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/outboxrelay/outbox"
)

// MySQL has no LISTEN/NOTIFY: relays poll (see [Backend.PollInterval]),
// and an appender in the same process wakes them at once through the
// Backend's in-process notifications ([Backend.Notify], [Backend.InTx]).

// notifyBuffer is the buffer of each Notifications channel, in values.
const notifyBuffer = 256

// PollInterval is how often a relay polls a partition that had nothing
// due when nothing wakes it sooner: [DefaultPollInterval]. It makes the
// Backend an [outbox.PollAdvisor], so a relay with no
// RelayOptions.PollInterval uses it.
func (b *Backend) PollInterval() time.Duration { return DefaultPollInterval }

// Notifications returns a channel that receives, soon after a transaction
// that appended entries commits, the partitions it appended to, one value
// per partition: those of transactions committed with [Backend.Commit]
// or [Backend.InTx] and those given to [Backend.Notify], in this process
// only (appenders in other processes, and transactions committed with
// tx.Commit, are found by polling). With Options.NoNotify the channel
// receives nothing.
//
// Each channel buffers 256 values and is never waited on: a notification
// whose partitions do not all fit in the room left in the buffer sends
// [outbox.AllPartitions] instead, and when the buffer is full it is
// dropped (the relay's polling finds the entries it announced). The
// channel is closed when ctx is done or the backend is closed. See
// [outbox.Notifier].
func (b *Backend) Notifications(ctx context.Context) (<-chan int, error) {
	if err := b.checkOpen("Notifications"); err != nil {
		return nil, err
	}
	return b.core.hub.subscribe(ctx), nil
}

// Notify wakes the relays of this process (their [Backend.Notifications]
// channels) for the given partitions, or for every partition when none is
// given: for commits the Backend does not see (see [Backend.Commit]). A partition out of range wakes
// every partition. It never blocks; it does nothing with Options.NoNotify
// or after Close.
func (b *Backend) Notify(partitions ...int) {
	if b.opts.NoNotify || b.closed.Load() {
		return
	}
	values := []int{outbox.AllPartitions}
	if len(partitions) > 0 {
		values = slices.Clone(partitions)
		slices.Sort(values)
		values = slices.Compact(values)
		for _, p := range values {
			if p < 0 || p >= b.opts.Partitions {
				values = []int{outbox.AllPartitions}
				break
			}
		}
	}
	b.core.hub.broadcast(values)
}

// hub fans notifications out to the Notifications channels.
type hub struct {
	mu     sync.Mutex
	subs   map[chan int]struct{}
	done   chan struct{}
	closed bool
}

func (h *hub) init() {
	h.subs = map[chan int]struct{}{}
	h.done = make(chan struct{})
}

// subscribe returns a channel registered until ctx is done or the hub
// closes; then it is closed.
func (h *hub) subscribe(ctx context.Context) <-chan int {
	ch := make(chan int, notifyBuffer)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		close(ch)
		return ch
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-h.done:
		}
		h.mu.Lock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
		h.mu.Unlock()
	}()
	return ch
}

// broadcast sends values to every channel that has room for all of them,
// [outbox.AllPartitions] to one that has room for one, nothing to a full
// one. It never blocks.
func (h *hub) broadcast(values []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		switch room := cap(ch) - len(ch); {
		case room >= len(values):
			for _, v := range values {
				ch <- v
			}
		case room > 0:
			ch <- outbox.AllPartitions
		}
	}
}

// close closes every channel; later subscriptions get a closed channel.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.subs == nil {
		return
	}
	h.closed = true
	close(h.done)
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}

// txParts records, for each transaction AppendInTx appended to, the
// partitions it appended to, until [Backend.Commit] or [Backend.InTx]
// takes them. The transactions are held weakly: the record of one that
// was committed or rolled back otherwise goes when the transaction is
// garbage collected.
type txParts struct {
	mu sync.Mutex
	m  map[weak.Pointer[sql.Tx]]map[int]struct{}
}

func (t *txParts) add(tx *sql.Tx, entries []outbox.Entry) {
	k := weak.Make(tx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[weak.Pointer[sql.Tx]]map[int]struct{}{}
	}
	parts, ok := t.m[k]
	if !ok {
		parts = map[int]struct{}{}
		t.m[k] = parts
		runtime.AddCleanup(tx, t.forget, k)
	}
	for _, e := range entries {
		parts[e.Partition] = struct{}{}
	}
}

func (t *txParts) forget(k weak.Pointer[sql.Tx]) {
	t.mu.Lock()
	delete(t.m, k)
	t.mu.Unlock()
}

// take forgets tx and returns its partitions, ascending.
func (t *txParts) take(tx *sql.Tx) []int {
	k := weak.Make(tx)
	t.mu.Lock()
	parts := t.m[k]
	delete(t.m, k)
	t.mu.Unlock()
	out := make([]int, 0, len(parts))
	for p := range parts {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// len is how many transactions are recorded.
func (t *txParts) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Commit commits tx and then wakes the relays of this process for
// exactly the partitions [Backend.AppendInTx] appended to in tx (nothing
// when the commit fails or tx appended nothing): use it instead of
// tx.Commit for transactions that append. A transaction committed with
// tx.Commit is found by the relays' polling instead. The error of a
// failed commit is mapped as every error of the package ([Retryable]
// included).
func (b *Backend) Commit(tx *sql.Tx) error {
	const op = "Commit"
	if tx == nil {
		return fmt.Errorf("mysqloutbox: %s: tx is nil: %w", op, outbox.ErrInvalidArgument)
	}
	if err := tx.Commit(); err != nil {
		b.core.txs.take(tx)
		if errors.Is(err, sql.ErrTxDone) {
			return fmt.Errorf("mysqloutbox: %s: the transaction was already committed or rolled back: %w", op, err)
		}
		return b.interpretError(op, err)
	}
	if parts := b.core.txs.take(tx); len(parts) > 0 {
		b.Notify(parts...)
	}
	return nil
}

// Bounds of InTx's retries.
const (
	inTxAttempts = 5
	inTxBackoff  = 10 * time.Millisecond // doubled after each attempt, jittered
)

// InTx runs fn in a transaction of db (BeginTx with the pool's defaults)
// and commits it with [Backend.Commit], which wakes the relays of this process for exactly the
// partitions [Backend.AppendInTx] appended to in that transaction
// (nothing for a transaction that appended nothing, failed or rolled
// back). fn must not commit or roll back tx. When fn returns an error,
// the transaction is rolled back and the error returned as it is.
//
// When the server rolls the transaction back to break a deadlock, or a
// statement times out waiting for a lock ([Retryable]), InTx runs fn
// again in a new transaction, up to 5 attempts in all, after a short
// jittered pause (10 ms, doubling); fn must therefore be safe to run
// again. Past the last attempt the error says so and wraps the last
// attempt's error; when ctx ends during a pause, the error wraps both
// ctx's error and the last attempt's. A panic in fn rolls back and
// panics again.
func (b *Backend) InTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	const op = "InTx"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if db == nil || fn == nil {
		return fmt.Errorf("mysqloutbox: %s: db and fn must not be nil: %w", op, outbox.ErrInvalidArgument)
	}
	pause := inTxBackoff
	for attempt := 1; ; attempt++ {
		err := b.runTx(ctx, db, fn)
		if err == nil || !Retryable(err) {
			return err
		}
		if attempt == inTxAttempts {
			return fmt.Errorf("mysqloutbox: %s: the server rolled the transaction back %d times in a row (deadlock or lock wait timeout); giving up: %w", op, attempt, err)
		}
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("mysqloutbox: %s: %w while waiting to run the transaction again after: %w", op, ctx.Err(), err)
		case <-t.C:
		}
		pause *= 2
	}
}

// runTx is one attempt of InTx.
func (b *Backend) runTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return b.interpretError("InTx: starting the transaction", err)
	}
	committed := false
	defer func() {
		if !committed {
			b.core.txs.take(tx)
			rollback(tx)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committed = true // or failed: Commit forgets tx either way
	if err := b.Commit(tx); err != nil {
		if errors.Is(err, sql.ErrTxDone) {
			return fmt.Errorf("mysqloutbox: InTx: fn committed or rolled back the transaction itself; leave that to InTx: %w", err)
		}
		return fmt.Errorf("mysqloutbox: InTx: %w", err)
	}
	return nil
}
