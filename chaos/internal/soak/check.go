package soak

import (
	"slices"
	"strings"
	"time"
)

// The resource series the trend check fits, by the part of their name
// before ":" (the rest names the process or table).
const (
	SeriesRSS        = "rss_bytes"         // a relay's VmRSS
	SeriesGoroutines = "goroutines"        // a relay's go_goroutines
	SeriesTableBytes = "table_bytes"       // pg_total_relation_size of a table
	SeriesDeadTuples = "dead_tuples"       // n_dead_tup of a table
	SeriesUsedMemory = "used_memory_bytes" // Redis used_memory
	SeriesBacklog    = "backlog"           // entries pending in the outbox
)

// Bounds maps a resource kind (see the Series constants) to its bound.
// Series of kinds not in the map are recorded and plotted, not checked.
type Bounds map[string]Bound

// DefaultBounds are the bounds the full run states and justifies in docs/soak.md:
//
//   - relay RSS: 20% of its mean, at least 16 MiB, over the run;
//   - goroutines: 20%, at least 20;
//   - table size (with indexes): 25%, at least 4 MiB;
//   - dead tuples: 50%, at least 1,000 rows (the soak raises the floor
//     where autovacuum runs to the height of its sawtooth);
//   - Redis used_memory: 20%, at least 8 MiB;
//   - backlog: 100%, at least 1,000 entries.
func DefaultBounds() Bounds {
	return Bounds{
		SeriesRSS:        {Rel: 0.20, Abs: 16 << 20},
		SeriesGoroutines: {Rel: 0.20, Abs: 20},
		SeriesTableBytes: {Rel: 0.25, Abs: 4 << 20},
		SeriesDeadTuples: {Rel: 0.50, Abs: 1000},
		SeriesUsedMemory: {Rel: 0.20, Abs: 8 << 20},
		SeriesBacklog:    {Rel: 1.00, Abs: 1000},
	}
}

// Kind is the resource kind of a series name (the part before ":").
func Kind(series string) string {
	k, _, _ := strings.Cut(series, ":")
	return k
}

// CheckTrends runs [CheckTrend] on every series of samples whose kind
// has a bound, in name order.
func CheckTrends(samples []Sample, duration, warmup time.Duration, b Bounds) []TrendResult {
	var out []TrendResult
	for _, name := range SeriesNames(samples) {
		bound, ok := b[Kind(name)]
		if !ok {
			continue
		}
		out = append(out, CheckTrend(name, Series(samples, name), duration, warmup, bound))
	}
	return out
}

// Flagged returns the results that grow.
func Flagged(rs []TrendResult) []TrendResult {
	var out []TrendResult
	for _, r := range rs {
		if r.Flagged {
			out = append(out, r)
		}
	}
	return out
}

// FlaggedAny reports whether a series whose name matches one of names
// (exactly, or by kind when a name has no ":") is flagged.
func FlaggedAny(rs []TrendResult, names ...string) bool {
	return slices.ContainsFunc(rs, func(r TrendResult) bool {
		if !r.Flagged {
			return false
		}
		for _, n := range names {
			if r.Series == n || (!strings.Contains(n, ":") && Kind(r.Series) == n) {
				return true
			}
		}
		return false
	})
}
