package pgoutbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
)

// notifyBuffer is the buffer of each Notifications channel, in values.
const notifyBuffer = 256

// Notifications returns a channel that receives, soon after a transaction
// that appended entries commits, the partitions it appended to, one value
// per partition (PostgreSQL NOTIFY on Options.Channel, whose payload lists
// them comma-separated; see [Backend.AppendInTx]). A notification with an
// empty payload, one it cannot parse or one naming a partition out of
// range sends [outbox.AllPartitions] instead.
//
// The first call starts one listener: a dedicated connection outside the
// pool (Options.ListenConfig) that runs LISTEN and reconnects with capped
// exponential backoff when it breaks; after every reconnect it sends
// [outbox.AllPartitions], since notifications may have been missed
// meanwhile. The first call waits for the first LISTEN attempt (bounded by
// ctx), so a commit after it returns is not missed.
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
	b.listenMu.Lock()
	if b.listener == nil {
		cfg := b.opts.ListenConfig
		if cfg == nil {
			cfg = b.pool.Config().ConnConfig
		}
		b.listener = newListener(b.stopCtx, cfg.Copy(), b.opts, listenLogEvery)
	}
	l := b.listener
	b.listenMu.Unlock()
	ch := l.subscribe(ctx)
	// Wait for the first LISTEN attempt, so a commit right after this call
	// returns is not missed.
	select {
	case <-l.ready:
	case <-ctx.Done():
	}
	return ch, nil
}

type listener struct {
	cfg   *pgx.ConnConfig
	opts  Options
	ctx   context.Context
	done  chan struct{}
	ready chan struct{} // closed after the first LISTEN attempt
	once  sync.Once

	mu   sync.Mutex
	subs map[chan int]struct{}
}

// listenLogEvery is how often the listener summarises failed reconnects
// while its connection stays down.
const listenLogEvery = 30 * time.Second

// newListener starts a listener; while its connection is down it logs a
// summary at most every logEvery (listenLogEvery but in tests).
func newListener(ctx context.Context, cfg *pgx.ConnConfig, opts Options, logEvery time.Duration) *listener {
	l := &listener{cfg: cfg, opts: opts, ctx: ctx, done: make(chan struct{}), ready: make(chan struct{}), subs: map[chan int]struct{}{}}
	go l.run(logEvery)
	return l
}

func (l *listener) wait() { <-l.done }

func (l *listener) subscribe(ctx context.Context) <-chan int {
	ch := make(chan int, notifyBuffer)
	l.mu.Lock()
	if l.subs == nil { // listener already stopped
		l.mu.Unlock()
		close(ch)
		return ch
	}
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-l.ctx.Done():
		}
		l.mu.Lock()
		if _, ok := l.subs[ch]; ok {
			delete(l.subs, ch)
			close(ch)
		}
		l.mu.Unlock()
	}()
	return ch
}

// broadcast sends partitions to every subscriber without blocking. A
// subscriber whose buffer has no room for all of them gets
// [outbox.AllPartitions] instead (a superset, never a part of the list),
// or nothing when its buffer is full.
func (l *listener) broadcast(partitions []int) {
	l.mu.Lock()
	for ch := range l.subs {
		// Only the receiver takes values out, so the room can only grow
		// between this check and the sends.
		if cap(ch)-len(ch) < len(partitions) {
			select {
			case ch <- outbox.AllPartitions:
			default:
			}
			continue
		}
		for _, p := range partitions {
			ch <- p
		}
	}
	l.mu.Unlock()
}

// payloadPartitions parses a notification's payload: the partitions it
// lists, or [outbox.AllPartitions] alone when it is empty, cannot be
// parsed or names a partition outside [0, partitions).
func payloadPartitions(payload string, partitions int) []int {
	all := []int{outbox.AllPartitions}
	if payload == "" {
		return all
	}
	fields := strings.Split(payload, ",")
	out := make([]int, 0, len(fields))
	for _, f := range fields {
		p, err := strconv.Atoi(f)
		if err != nil || p < 0 || p >= partitions {
			return all
		}
		out = append(out, p)
	}
	return out
}

// run keeps a LISTEN connection until the backend closes, reconnecting
// with capped exponential backoff. Its log summarises an outage, as the
// relay's do: one WARN when the connection is lost (or the first one
// fails), at most one WARN per logEvery with the failed reconnects since
// the last line while it stays down, and one INFO when LISTEN works again.
func (l *listener) run(logEvery time.Duration) {
	defer func() {
		l.mu.Lock()
		for ch := range l.subs {
			close(ch)
		}
		l.subs = nil
		l.mu.Unlock()
		close(l.done)
	}()
	const minDelay, maxDelay = 50 * time.Millisecond, 5 * time.Second
	delay := minDelay
	var down listenOutage
	defer l.once.Do(func() { close(l.ready) })
	for attempt := 0; l.ctx.Err() == nil; attempt++ {
		err := l.listenOnce(attempt > 0, func() {
			delay = minDelay
			down.back(l.opts)
		})
		l.once.Do(func() { close(l.ready) })
		if l.ctx.Err() != nil {
			return
		}
		down.failed(l.opts, err, delay, logEvery)
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, maxDelay)
	}
}

// listenOutage is the state of the listener's connection while it is down
// (since is zero while it is up). Only run's goroutine uses it.
type listenOutage struct {
	since    time.Time // when the connection was lost
	lastLine time.Time // the last WARN
	count    int       // reconnects failed since the last WARN
	total    int       // reconnects failed since the connection was lost
}

// failed logs a lost connection, or counts a failed reconnect and logs
// the count when logEvery has passed since the last line.
func (o *listenOutage) failed(opts Options, err error, retryIn, logEvery time.Duration) {
	now := time.Now()
	if o.since.IsZero() {
		*o = listenOutage{since: now, lastLine: now}
		opts.Logger.Warn("pgoutbox: LISTEN connection lost; reconnecting (relays keep polling meanwhile)",
			"channel", opts.Channel, "retry_in", retryIn, "error", err)
		return
	}
	o.count++
	o.total++
	if now.Sub(o.lastLine) < logEvery {
		return
	}
	opts.Logger.Warn("pgoutbox: LISTEN connection still down; reconnecting (relays keep polling meanwhile)",
		"channel", opts.Channel, "failed_reconnects", o.count, "down_for", now.Sub(o.since).Round(time.Millisecond),
		"retry_in", retryIn, "error", err)
	o.lastLine, o.count = now, 0
}

// back logs that LISTEN works again after an outage.
func (o *listenOutage) back(opts Options) {
	if o.since.IsZero() {
		return
	}
	opts.Logger.Info("pgoutbox: LISTEN connection back; relays are woken to find what was appended meanwhile",
		"channel", opts.Channel, "down_for", time.Since(o.since).Round(time.Millisecond), "failed_reconnects", o.total)
	*o = listenOutage{}
}

// listenOnce connects, listens and forwards notifications until the
// connection fails or the backend closes.
func (l *listener) listenOnce(reconnect bool, connected func()) error {
	conn, err := pgx.ConnectConfig(l.ctx, l.cfg)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}()
	if _, err := conn.Exec(l.ctx, "LISTEN "+pgx.Identifier{l.opts.Channel}.Sanitize()); err != nil {
		return fmt.Errorf("LISTEN: %w", err)
	}
	connected()
	l.once.Do(func() { close(l.ready) })
	if reconnect {
		l.broadcast([]int{outbox.AllPartitions}) // anything appended while we were away
	}
	for {
		n, err := conn.WaitForNotification(l.ctx)
		if err != nil {
			return err
		}
		l.broadcast(payloadPartitions(n.Payload, l.opts.Partitions))
	}
}

// Bounds of the trailer.
const (
	// maxTrailDelay caps the wait between two checks of transactions that
	// stay open long after their append.
	maxTrailDelay = 100 * time.Millisecond
	// maxTrailAge is how long the trailer watches one transaction; one
	// still open after that is left to the relays' polling.
	maxTrailAge = 10 * time.Second
	// maxTrailIDs bounds the transactions watched at once; beyond it the
	// oldest are dropped (left to polling).
	maxTrailIDs = 4096
	// trailTimeout bounds one check.
	trailTimeout = 5 * time.Second
)

// trailer sends the trailing notifications of the appends that skipped
// their in-transaction NOTIFY (Options.NotifyInterval). It collects their
// transaction IDs, each with the partitions its append inserted into, and,
// one NotifyInterval later and then again while any is still open, runs
// notify_committed.sql on a connection of its own (opened on first use
// like the listener's, from Options.ListenConfig or the pool's config, so
// a busy pool does not delay it): one autocommit statement that sends the
// union of the partitions of those that committed (one NOTIFY per 700
// partitions). Waiting for the commit keeps the notification from arriving
// before the entries are visible (a relay woken too early finds nothing
// and sleeps until its poll), and a rolled-back transaction never causes
// one. An autocommit NOTIFY writes no WAL of its own that must be
// flushed, so it holds PostgreSQL's notify lock only briefly.
type trailer struct {
	b    *Backend
	kick chan struct{} // buffer of one: IDs were added
	done chan struct{} // closed when run returns
	conn *pgx.Conn     // the trailer's own connection; only run uses it

	mu      sync.Mutex
	pending []trailID
	started bool
	closed  bool
}

type trailID struct {
	xid   int64
	parts []int32 // the partitions the append inserted into; -1: unknown
	since time.Time
}

func newTrailer(b *Backend) *trailer {
	return &trailer{b: b, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// add watches the transaction xid, which appended to parts; it starts the
// trailer's goroutine on first use. It never blocks on I/O.
func (t *trailer) add(xid int64, parts []int32) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if len(t.pending) >= maxTrailIDs {
		t.pending = append(t.pending[:0], t.pending[1:]...)
	}
	t.pending = append(t.pending, trailID{xid: xid, parts: parts, since: time.Now()})
	if !t.started {
		t.started = true
		go t.run()
	}
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// close stops the goroutine and waits for it (the Backend's stopCtx is
// already cancelled).
func (t *trailer) close() {
	t.mu.Lock()
	t.closed = true
	started := t.started
	t.mu.Unlock()
	if started {
		<-t.done
	}
}

func (t *trailer) run() {
	defer close(t.done)
	defer func() {
		if t.conn != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = t.conn.Close(ctx)
		}
	}()
	ctx := t.b.stopCtx
	interval := min(t.b.opts.NotifyInterval, maxTrailDelay)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		t.mu.Lock()
		var youngest time.Duration = -1
		if n := len(t.pending); n > 0 {
			youngest = time.Since(t.pending[n-1].since)
		}
		t.mu.Unlock()
		if youngest < 0 {
			select {
			case <-ctx.Done():
				return
			case <-t.kick:
				continue
			}
		}
		// Give the youngest transaction about one interval to commit;
		// back off for transactions that stay open.
		delay := max(interval-youngest, min(youngest/2, maxTrailDelay), interval/4)
		timer.Reset(delay)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		select {
		case <-t.kick: // the IDs it announced are taken below
		default:
		}
		t.mu.Lock()
		batch := t.pending
		t.pending = nil
		t.mu.Unlock()
		open, err := t.check(ctx, batch)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			t.b.opts.Logger.Warn("pgoutbox: trailing notification failed; relays find these entries by polling",
				"channel", t.b.opts.Channel, "transactions", len(batch), "error", err)
		}
		t.mu.Lock()
		t.pending = append(open, t.pending...)
		t.mu.Unlock()
	}
}

// check runs notify_committed.sql for batch and returns the entries of
// batch still open and younger than maxTrailAge.
func (t *trailer) check(ctx context.Context, batch []trailID) ([]trailID, error) {
	xids := make([]int64, len(batch))
	var pairX []int64
	var pairP []int32
	for i, id := range batch {
		xids[i] = id.xid
		for _, p := range id.parts {
			pairX, pairP = append(pairX, id.xid), append(pairP, p)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, trailTimeout)
	defer cancel()
	if t.conn == nil {
		cfg := t.b.opts.ListenConfig
		if cfg == nil {
			cfg = t.b.pool.Config().ConnConfig
		}
		conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			return nil, fmt.Errorf("connecting: %w", err)
		}
		t.conn = conn
	}
	var open []int64
	var notified int64
	if err := t.conn.QueryRow(ctx, t.b.qNotifyCommitted, t.b.opts.Channel, xids, pairX, pairP).Scan(&open, &notified); err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = t.conn.Close(closeCtx)
		t.conn = nil // reconnect at the next check
		return nil, err
	}
	if len(open) == 0 {
		return nil, nil
	}
	isOpen := make(map[int64]bool, len(open))
	for _, x := range open {
		isOpen[x] = true
	}
	var keep []trailID
	for _, id := range batch {
		if isOpen[id.xid] && time.Since(id.since) < maxTrailAge {
			keep = append(keep, id)
		}
	}
	return keep, nil
}
