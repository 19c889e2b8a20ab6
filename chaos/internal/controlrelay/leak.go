package controlrelay

import (
	"context"
	"sync"
	"time"
)

// leakTick is how often the leak mode allocates its next chunk.
const leakTick = 100 * time.Millisecond

// leaker is the leak mode's growing slice: every tick it allocates the
// bytes the rate asks for since the last tick, writes every page of them
// (so they are resident, not merely reserved), and keeps them until the
// process exits. The soak's trend check must flag the relay's RSS.
type leaker struct {
	mu     sync.Mutex
	chunks [][]byte
	bytes  int64
}

// run leaks rate bytes per second, a chunk every tick, until ctx ends.
func (l *leaker) run(ctx context.Context, rate int64, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	var owed float64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			// A late tick catches up by one tick's worth at most, so a
			// stalled machine gets no burst.
			perTick := float64(rate) * tick.Seconds()
			owed = min(owed+float64(rate)*now.Sub(last).Seconds(), 2*perTick)
			last = now
			if n := int64(owed); n > 0 {
				l.grow(n)
				owed -= float64(n)
			}
		}
	}
}

// grow allocates n bytes, touches each 4 KiB page and keeps them.
func (l *leaker) grow(n int64) {
	b := make([]byte, n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	l.mu.Lock()
	l.chunks = append(l.chunks, b)
	l.bytes += n
	l.mu.Unlock()
}

// held is how many bytes the leaker keeps.
func (l *leaker) held() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}
