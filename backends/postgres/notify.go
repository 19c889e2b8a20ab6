package pgoutbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notifications returns a channel that receives a value soon after a
// transaction that appended entries commits (PostgreSQL NOTIFY on
// Options.Channel). The first call starts one listener: a dedicated
// connection outside the pool (Options.ListenConfig) that runs LISTEN and
// reconnects with capped exponential backoff when it breaks; after every
// reconnect it sends a value too, since notifications may have been missed
// meanwhile. The first call waits for the first LISTEN attempt (bounded
// by ctx), so a commit after it returns is not missed. Each channel has a buffer of one and a slow receiver
// misses values rather than blocking. The channel is closed when ctx is
// done or the backend is closed. See [outbox.Notifier].
func (b *Backend) Notifications(ctx context.Context) (<-chan struct{}, error) {
	if err := b.checkOpen("Notifications"); err != nil {
		return nil, err
	}
	b.listenMu.Lock()
	if b.listener == nil {
		cfg := b.opts.ListenConfig
		if cfg == nil {
			cfg = b.pool.Config().ConnConfig
		}
		b.listener = newListener(b.stopCtx, cfg.Copy(), b.opts)
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
	subs map[chan struct{}]struct{}
}

func newListener(ctx context.Context, cfg *pgx.ConnConfig, opts Options) *listener {
	l := &listener{cfg: cfg, opts: opts, ctx: ctx, done: make(chan struct{}), ready: make(chan struct{}), subs: map[chan struct{}]struct{}{}}
	go l.run()
	return l
}

func (l *listener) wait() { <-l.done }

func (l *listener) subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
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

func (l *listener) broadcast() {
	l.mu.Lock()
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
}

func (l *listener) run() {
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
	defer l.once.Do(func() { close(l.ready) })
	for attempt := 0; l.ctx.Err() == nil; attempt++ {
		err := l.listenOnce(attempt > 0, func() { delay = minDelay })
		l.once.Do(func() { close(l.ready) })
		if l.ctx.Err() != nil {
			return
		}
		l.opts.Logger.Warn("pgoutbox: LISTEN connection lost; reconnecting (relays keep polling meanwhile)",
			"channel", l.opts.Channel, "retry_in", delay, "error", err)
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, maxDelay)
	}
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
		l.broadcast() // anything appended while we were away
	}
	for {
		if _, err := conn.WaitForNotification(l.ctx); err != nil {
			return err
		}
		l.broadcast()
	}
}
