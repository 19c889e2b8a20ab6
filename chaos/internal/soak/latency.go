package soak

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Quantile returns the q-quantile (0..1) of ds by the nearest-rank
// method, 0 for an empty ds. It sorts ds in place.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// LatencyStats are the p50, p99 and max of a set of latencies and how
// many there were.
type LatencyStats struct {
	N             int
	P50, P99, Max time.Duration
}

// Stats returns ds's LatencyStats, sorting ds in place.
func Stats(ds []time.Duration) LatencyStats {
	if len(ds) == 0 {
		return LatencyStats{}
	}
	s := LatencyStats{N: len(ds), P50: Quantile(ds, 0.5), P99: Quantile(ds, 0.99)}
	s.Max = ds[len(ds)-1]
	return s
}

// Latencies collects commit-to-publish latencies as they are observed:
// Take returns and forgets those since the last Take (a sample), and the
// latencies are also kept per window of the run (by the time they were
// observed, relative to the start given to NewLatencies) for the window
// check. Safe for concurrent use.
type Latencies struct {
	mu      sync.Mutex
	start   time.Time
	window  time.Duration
	current []time.Duration
	windows [][]time.Duration
}

// NewLatencies returns an empty collector whose windows are window long
// from start.
func NewLatencies(start time.Time, window time.Duration) *Latencies {
	return &Latencies{start: start, window: window}
}

// Observe records latency d observed at time at. Observations before the
// start are dropped.
func (l *Latencies) Observe(at time.Time, d time.Duration) {
	if at.Before(l.start) {
		return
	}
	w := int(at.Sub(l.start) / l.window)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.current = append(l.current, d)
	for len(l.windows) <= w {
		l.windows = append(l.windows, nil)
	}
	l.windows[w] = append(l.windows[w], d)
}

// Take returns the stats of the latencies observed since the last Take.
func (l *Latencies) Take() LatencyStats {
	l.mu.Lock()
	cur := l.current
	l.current = nil
	l.mu.Unlock()
	return Stats(cur)
}

// Windows returns each window's stats, the first n windows only (the
// windows the load filled; later observations are the drain's).
func (l *Latencies) Windows(n int) []LatencyStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]LatencyStats, n)
	for i := range min(n, len(l.windows)) {
		out[i] = Stats(slices.Clone(l.windows[i]))
	}
	return out
}

// LatencyResult is the window check's verdict.
type LatencyResult struct {
	Windows []LatencyStats
	// Limit is the bound on each window's p99: max(Factor times the
	// first window's p99, the first's plus Floor).
	Limit time.Duration
	// Failed lists the windows (0-based) over the limit, and windows
	// with no latency at all (nothing was published in them).
	Failed []int
}

// OK reports no failed window.
func (r LatencyResult) OK() bool { return len(r.Failed) == 0 && len(r.Windows) > 0 }

// CheckLatency checks that the p99 of every window is at most factor
// times the first window's p99, or the first's plus floor when that is
// more (a floor for p99s of a few milliseconds, where one scheduler
// delay on a loaded machine is a factor of 2). A window where nothing
// was published fails.
func CheckLatency(windows []LatencyStats, factor float64, floor time.Duration) LatencyResult {
	r := LatencyResult{Windows: windows}
	if len(windows) == 0 {
		return r
	}
	first := windows[0].P99
	r.Limit = max(time.Duration(factor*float64(first)), first+floor)
	for i, w := range windows {
		if w.N == 0 || w.P99 > r.Limit {
			r.Failed = append(r.Failed, i)
		}
	}
	return r
}

// String says which windows failed, with their p99s.
func (r LatencyResult) String() string {
	if len(r.Windows) == 0 {
		return "no latency window"
	}
	if r.OK() {
		return fmt.Sprintf("every window's p99 within %v (first window's p99 %v)", r.Limit, r.Windows[0].P99)
	}
	s := fmt.Sprintf("p99 limit %v (first window's p99 %v):", r.Limit, r.Windows[0].P99)
	for _, i := range r.Failed {
		w := r.Windows[i]
		if w.N == 0 {
			s += fmt.Sprintf(" window %d published nothing;", i+1)
		} else {
			s += fmt.Sprintf(" window %d p99 %v over it;", i+1, w.P99)
		}
	}
	return s
}
