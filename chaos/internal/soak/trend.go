package soak

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Point is one sample of a resource series: T seconds since the soak's
// start, the value V, and the generation Gen of the process it was read
// from (a restarted relay starts a new generation; series of servers
// and tables keep generation 0).
type Point struct {
	T   float64
	V   float64
	Gen int
}

// Slope fits a least-squares line to points and returns its slope in
// units per second. Points of different generations are fitted with a
// common slope and an intercept each (the pooled within-generation
// slope), so that a restarted process's drop and climb back are not read
// as a trend, while a leak inside every generation still is. ok is false
// when no generation has two points at different times.
func Slope(points []Point) (slope float64, ok bool) {
	type acc struct{ n, st, sv float64 }
	means := map[int]*acc{}
	for _, p := range points {
		a := means[p.Gen]
		if a == nil {
			a = &acc{}
			means[p.Gen] = a
		}
		a.n++
		a.st += p.T
		a.sv += p.V
	}
	var num, den float64
	for _, p := range points {
		a := means[p.Gen]
		dt := p.T - a.st/a.n
		num += dt * (p.V - a.sv/a.n)
		den += dt * dt
	}
	if den == 0 {
		return 0, false
	}
	return num / den, true
}

// Bound is the most a resource may grow over a run before the trend
// check flags it: the fitted slope times the run's duration must stay
// under Rel times the series' mean over the fitted points, or under
// Abs (in the series' unit), whichever is larger. Abs keeps noise on a
// small series (a few goroutines, a near-empty table) from failing the
// check; Rel scales with the series.
type Bound struct {
	Rel float64
	Abs float64
}

// TrendResult is the trend check's verdict on one series.
type TrendResult struct {
	// Series names the resource ("rss_bytes:relay-0").
	Series string
	// Points is how many samples were fitted.
	Points int
	// SlopePerHour is the fitted slope, in the series' unit per hour.
	SlopePerHour float64
	// Growth is the slope times the run's duration.
	Growth float64
	// Mean is the mean of the fitted samples.
	Mean float64
	// Limit is the bound on Growth: max(Rel*Mean, Abs).
	Limit float64
	// Flagged reports Growth > Limit.
	Flagged bool
	// Fitted is false when there were too few points to fit (never
	// flagged then).
	Fitted bool
}

// String says what the check found, with the numbers.
func (r TrendResult) String() string {
	if !r.Fitted {
		return fmt.Sprintf("%s: too few samples to fit (%d)", r.Series, r.Points)
	}
	verdict, cmp := "flat enough", "<="
	if r.Flagged {
		verdict, cmp = "GROWS", ">"
	}
	return fmt.Sprintf("%s: %s: slope %s/h, growth over the run %s %s limit %s (mean %s, %d samples)",
		r.Series, verdict, Human(r.Series, r.SlopePerHour), Human(r.Series, r.Growth), cmp, Human(r.Series, r.Limit), Human(r.Series, r.Mean), r.Points)
}

// CheckTrend fits the points of series name that lie in the last half of
// a run of the given duration (T >= duration/2), leaving out each
// generation's first warmup seconds, and flags the series when its
// growth over the whole duration exceeds b (see [Bound]).
func CheckTrend(name string, points []Point, duration, warmup time.Duration, b Bound) TrendResult {
	half := duration.Seconds() / 2
	start := map[int]float64{} // each generation's first sample
	for _, p := range points {
		if s, ok := start[p.Gen]; !ok || p.T < s {
			start[p.Gen] = p.T
		}
	}
	var fit []Point
	var sum float64
	for _, p := range points {
		if p.T < half || math.IsNaN(p.V) {
			continue
		}
		// A restarted process's first samples are its warm-up, not a
		// trend; generation 0 started with the run, before the last
		// half.
		if p.Gen > 0 && p.T-start[p.Gen] < warmup.Seconds() {
			continue
		}
		fit = append(fit, p)
		sum += p.V
	}
	r := TrendResult{Series: name, Points: len(fit)}
	slope, ok := Slope(fit)
	if !ok || len(fit) < 3 {
		return r
	}
	r.Fitted = true
	r.SlopePerHour = slope * 3600
	r.Growth = slope * duration.Seconds()
	r.Mean = sum / float64(len(fit))
	r.Limit = math.Max(b.Rel*math.Abs(r.Mean), b.Abs)
	r.Flagged = r.Growth > r.Limit
	return r
}

// Human renders v in the unit the series name says: bytes for
// "*_bytes*", else a plain number.
func Human(series string, v float64) string {
	if strings.Contains(series, "_bytes") {
		return HumanBytes(v)
	}
	if math.Abs(v) >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// HumanBytes renders a byte count in KiB, MiB or GiB.
func HumanBytes(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1<<30:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	case a >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case a >= 1<<10:
		return fmt.Sprintf("%.0f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}
