package outbox

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Health checks: with a store that implements [HealthChecker] (and
// RelayOptions.HealthInterval not negative), every relay of a fleet calls
// Health when it starts and then every HealthInterval, logs each warning
// once at WARN when it appears and at INFO when it is gone, and exports the
// figures of the last reading as gauges. Every relay does it, not only the
// holder of partition 0: the call reads the store's statistics only, and a
// warning logged by each relay is seen whichever relay's logs are read.

// warningKey identifies a [HealthWarning] across readings.
type warningKey struct{ code, object string }

// healthWatch follows the health of a relay's store.
type healthWatch struct {
	checker HealthChecker
	every   time.Duration
	now     func() time.Time
	log     *slog.Logger
	stores  *storeLog

	mu     sync.Mutex
	last   Health    // the last reading
	at     time.Time // when last was read; zero before the first
	active map[warningKey]HealthWarning
}

// newHealthWatch returns the health watch of a relay over store with the
// options o (defaults applied), nil when the store is not a HealthChecker
// or the checks are off (HealthInterval negative).
func newHealthWatch(store Store, o RelayOptions, log *slog.Logger, stores *storeLog) *healthWatch {
	hc, ok := store.(HealthChecker)
	if !ok || o.HealthInterval < 0 {
		return nil
	}
	return &healthWatch{checker: hc, every: o.HealthInterval, now: o.Now, log: log, stores: stores, active: map[warningKey]HealthWarning{}}
}

// run reads the store's health at once and then every interval until ctx
// ends.
func (h *healthWatch) run(ctx context.Context) {
	for {
		h.check(ctx)
		if !sleep(ctx, h.every) {
			return
		}
	}
}

// check reads the store's health once, records it for the gauges and logs
// the warnings that appeared or went away since the last reading. A failed
// reading is logged with the relay's other store failures and changes
// nothing: the warnings stay as last read.
func (h *healthWatch) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, min(h.every, 30*time.Second))
	defer cancel()
	began := h.now()
	hl, err := h.checker.Health(cctx)
	if err != nil {
		h.stores.failed(ctx, opHealth, noPartition, began, err)
		return
	}
	h.stores.ok(opHealth, noPartition)
	now := map[warningKey]HealthWarning{}
	for _, w := range hl.Warnings {
		now[warningKey{w.Code, w.Object}] = w
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range hl.Warnings {
		k := warningKey{w.Code, w.Object}
		if _, ok := h.active[k]; !ok {
			h.active[k] = w
			h.log.Warn("outbox relay: store health: "+w.Message, "code", w.Code, "object", w.Object)
		}
	}
	for k, w := range h.active {
		if _, ok := now[k]; !ok {
			delete(h.active, k)
			h.log.Info("outbox relay: store health: the condition is gone", "code", w.Code, "object", w.Object)
		}
	}
	h.last, h.at = hl, h.now()
}

// current returns the last reading, ok false before the first or when it
// is older than three intervals (a stale figure is reported as missing).
func (h *healthWatch) current() (Health, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at.IsZero() || h.now().Sub(h.at) > 3*h.every {
		return Health{}, false
	}
	return h.last, true
}

// warnings returns the warnings that hold now, as first logged, ordered
// by code and object.
func (h *healthWatch) warnings() []HealthWarning {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HealthWarning, 0, len(h.active))
	for _, w := range h.active {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b HealthWarning) int {
		if a.Code != b.Code {
			return strings.Compare(a.Code, b.Code)
		}
		return strings.Compare(a.Object, b.Object)
	})
	return out
}
