package soak

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func line(n int, dt, v0, slope float64, gen int) []Point {
	ps := make([]Point, n)
	for i := range ps {
		t := float64(i) * dt
		ps[i] = Point{T: t, V: v0 + slope*t, Gen: gen}
	}
	return ps
}

func TestSlopeOfALineIsItsSlope(t *testing.T) {
	t.Parallel()
	for _, slope := range []float64{0, 1.5, -3, 1e6} {
		got, ok := Slope(line(20, 10, 100, slope, 0))
		if !ok || math.Abs(got-slope) > 1e-9*math.Max(1, math.Abs(slope)) {
			t.Errorf("Slope of a line with slope %v = %v, %v", slope, got, ok)
		}
	}
}

func TestSlopeNeedsTwoTimes(t *testing.T) {
	t.Parallel()
	if _, ok := Slope(nil); ok {
		t.Error("Slope(nil) ok")
	}
	if _, ok := Slope([]Point{{T: 1, V: 1}, {T: 1, V: 5}}); ok {
		t.Error("Slope of two points at one time ok")
	}
}

// A restarted process drops back and climbs again: with one intercept per
// generation, flat generations fit a flat slope, though the pooled points
// fall.
func TestSlopeIgnoresTheDropOfARestart(t *testing.T) {
	t.Parallel()
	a := line(10, 10, 100, 0, 0)
	b := line(10, 10, 40, 0, 1)
	for i := range b {
		b[i].T += 100
	}
	got, ok := Slope(append(a, b...))
	if !ok || got != 0 {
		t.Errorf("Slope of two flat generations = %v, %v; want 0", got, ok)
	}
	// Without generations the same points fall.
	for i := range b {
		b[i].Gen = 0
	}
	if got, _ := Slope(append(a, b...)); got >= 0 {
		t.Errorf("Slope of the points as one generation = %v; want negative", got)
	}
}

// A leak inside every generation is still a leak.
func TestSlopeSeesALeakAcrossRestarts(t *testing.T) {
	t.Parallel()
	a := line(10, 10, 100, 2, 0)
	b := line(10, 10, 40, 2, 1)
	for i := range b {
		b[i].T += 100
	}
	got, ok := Slope(append(a, b...))
	if !ok || math.Abs(got-2) > 1e-9 {
		t.Errorf("Slope = %v, %v; want 2", got, ok)
	}
}

func TestCheckTrendVerdicts(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	dur := 60 * time.Minute
	b := Bound{Rel: 0.2, Abs: 16 * mib}
	n := 361 // a sample every 10 s
	cases := []struct {
		name    string
		points  []Point
		flagged bool
	}{
		{"FlatIsNotFlagged", line(n, 10, 80*mib, 0, 0), false},
		// 10 MiB over the hour: under the 16 MiB floor and 20% of 80 MiB.
		{"SlowGrowthUnderTheBound", line(n, 10, 80*mib, 10.0*mib/3600, 0), false},
		// 40 MiB over the hour: over both.
		{"LeakIsFlagged", line(n, 10, 80*mib, 40.0*mib/3600, 0), true},
		// A sawtooth (vacuum, GC) around a flat level.
		{"SawtoothIsNotFlagged", sawtooth(n, 10, 80*mib, 8*mib, 6), false},
		// Growth in the first half only, flat in the last: levelled off.
		{"GrowthThatLevelsOffIsNotFlagged", levelsOff(n, 10, 20*mib, 100*mib), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := CheckTrend("rss_bytes:relay-0", c.points, dur, time.Minute, b)
			if !r.Fitted || r.Flagged != c.flagged {
				t.Errorf("flagged %v (fitted %v), want %v: %s", r.Flagged, r.Fitted, c.flagged, r)
			}
		})
	}
}

func sawtooth(n int, dt, base, amp float64, period int) []Point {
	ps := make([]Point, n)
	for i := range ps {
		ps[i] = Point{T: float64(i) * dt, V: base + amp*float64(i%period)/float64(period)}
	}
	return ps
}

func levelsOff(n int, dt, from, to float64) []Point {
	ps := make([]Point, n)
	for i := range ps {
		v := to
		if i < n/3 {
			v = from + (to-from)*float64(i)/float64(n/3)
		}
		ps[i] = Point{T: float64(i) * dt, V: v}
	}
	return ps
}

// A restarted relay's warm-up climb is left out of the fit.
func TestCheckTrendLeavesOutTheWarmUpOfARestart(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	var ps []Point
	for i := range 18 { // 3 minutes, generation 0 flat at 60 MiB
		ps = append(ps, Point{T: float64(i) * 10, V: 60 * mib})
	}
	// Restarted at 100 s: generation 1 climbs from 20 to 60 MiB over
	// its first 20 s, then stays.
	for i := range ps {
		if ps[i].T >= 100 {
			age := ps[i].T - 100
			ps[i] = Point{T: ps[i].T, V: min(20*mib+2*mib*age, 60*mib), Gen: 1}
		}
	}
	b := Bound{Rel: 0.2, Abs: 16 * mib}
	if r := CheckTrend("rss_bytes:relay-1", ps, 3*time.Minute, 20*time.Second, b); r.Flagged {
		t.Errorf("flagged with the warm-up left out: %s", r)
	}
	if r := CheckTrend("rss_bytes:relay-1", ps, 3*time.Minute, 0, b); !r.Flagged {
		t.Errorf("not flagged with the warm-up fitted (the test shows nothing): %s", r)
	}
}

func TestCheckTrendNeedsPoints(t *testing.T) {
	t.Parallel()
	r := CheckTrend("backlog", line(3, 10, 0, 100, 0), time.Minute, 0, Bound{})
	if r.Fitted || r.Flagged {
		t.Errorf("two points in the last half fitted: %s", r)
	}
}

func TestCheckTrendsPicksBoundsByKind(t *testing.T) {
	t.Parallel()
	var samples []Sample
	for i := range 37 {
		s := Sample{T: float64(i) * 10}
		s.SetGen("rss_bytes:relay-0", 50<<20+float64(i)*(1<<20), 0) // +36 MiB
		s.Set("dead_tuples:outbox", 1000)
		s.Set("latency_p99_ms", float64(i)) // not a resource
		samples = append(samples, s)
	}
	rs := CheckTrends(samples, 6*time.Minute, time.Minute, DefaultBounds())
	if len(rs) != 2 {
		t.Fatalf("checked %d series, want 2 (rss, dead tuples): %v", len(rs), rs)
	}
	if !FlaggedAny(rs, "rss_bytes:relay-0") || !FlaggedAny(rs, SeriesRSS) {
		t.Errorf("the growing RSS is not flagged: %v", rs)
	}
	if FlaggedAny(rs, "dead_tuples:outbox", SeriesBacklog) {
		t.Errorf("flat dead tuples flagged: %v", rs)
	}
	if len(Flagged(rs)) != 1 {
		t.Errorf("Flagged = %v", Flagged(rs))
	}
}

func TestQuantileAndStats(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := Stats(ds)
	if s.N != 100 || s.P50 != 50*time.Millisecond || s.P99 != 99*time.Millisecond || s.Max != 100*time.Millisecond {
		t.Errorf("Stats = %+v", s)
	}
	if Quantile(nil, 0.5) != 0 || (Stats(nil) != LatencyStats{}) {
		t.Error("empty input not zero")
	}
}

func TestLatenciesWindowsAndTake(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLatencies(start, time.Minute)
	l.Observe(start.Add(-time.Second), time.Hour) // before the start: dropped
	for i := range 120 {
		l.Observe(start.Add(time.Duration(i)*time.Second), time.Duration(1+i/60)*time.Millisecond)
	}
	if s := l.Take(); s.N != 120 || s.Max != 2*time.Millisecond {
		t.Errorf("Take = %+v", s)
	}
	if s := l.Take(); s.N != 0 {
		t.Errorf("second Take = %+v, want empty", s)
	}
	w := l.Windows(3)
	if len(w) != 3 || w[0].P99 != time.Millisecond || w[1].P99 != 2*time.Millisecond || w[2].N != 0 {
		t.Errorf("Windows = %+v", w)
	}
}

func TestCheckLatencyVerdicts(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	win := func(p99s ...time.Duration) []LatencyStats {
		var ws []LatencyStats
		for _, p := range p99s {
			ws = append(ws, LatencyStats{N: 100, P99: p})
		}
		return ws
	}
	cases := []struct {
		name   string
		ws     []LatencyStats
		floor  time.Duration
		failed []int
	}{
		{"Steady", win(20*ms, 25*ms, 39*ms), 0, nil},
		{"OverTwice", win(20*ms, 41*ms, 30*ms), 0, []int{1}},
		{"FloorForSmallP99s", win(2*ms, 11*ms), 10 * ms, nil},
		{"OverTheFloor", win(2*ms, 13*ms), 10 * ms, []int{1}},
		{"EmptyWindowFails", append(win(20*ms), LatencyStats{}), 0, []int{1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := CheckLatency(c.ws, 2, c.floor)
			if len(r.Failed) != len(c.failed) || (len(c.failed) > 0 && r.Failed[0] != c.failed[0]) {
				t.Errorf("failed windows %v, want %v: %s", r.Failed, c.failed, r)
			}
			if r.OK() != (len(c.failed) == 0) {
				t.Errorf("OK() = %v with failed %v", r.OK(), r.Failed)
			}
		})
	}
	if (CheckLatency(nil, 2, 0)).OK() {
		t.Error("no window is OK")
	}
}

func TestCSVRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var samples []Sample
	for i := range 3 {
		s := Sample{At: at.Add(time.Duration(i) * 10 * time.Second), T: float64(i) * 10}
		s.SetGen("rss_bytes:relay-0", float64(1000+i), i/2)
		if i != 1 {
			s.Set("backlog", float64(i))
		}
		samples = append(samples, s)
	}
	path := filepath.Join(t.TempDir(), "samples.csv")
	if err := WriteCSV(path, samples); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "t,at,backlog,rss_bytes:relay-0,gen:rss_bytes:relay-0\n") {
		t.Errorf("header: %q", strings.SplitN(string(b), "\n", 2)[0])
	}
	got, err := ReadCSV(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("read %d samples", len(got))
	}
	for i, s := range got {
		want := samples[i]
		if !s.At.Equal(want.At) || s.T != want.T || len(s.Values) != len(want.Values) {
			t.Errorf("sample %d: %+v, want %+v", i, s, want)
		}
		for k, v := range want.Values {
			if s.Values[k] != v || s.Gens[k] != want.Gens[k] {
				t.Errorf("sample %d %s: %v gen %d, want %v gen %d", i, k, s.Values[k], s.Gens[k], v, want.Gens[k])
			}
		}
	}
}

func TestWritePNG(t *testing.T) {
	t.Parallel()
	var samples []Sample
	for i := range 30 {
		s := Sample{T: float64(i) * 10}
		s.Set("latency_p99_ms", 5+float64(i%4))
		s.Set("latency_p50_ms", 0) // dropped on a log scale
		samples = append(samples, s)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "chart.png")
	c := Chart{Title: "latency", YLabel: "ms", Series: []string{"latency_p50_ms", "latency_p99_ms"}, Log: true}
	if err := WritePNG(path, c, samples); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Errorf("not a PNG: %d bytes, %v", len(b), err)
	}
	if err := WritePNG(filepath.Join(dir, "none.png"), Chart{Series: []string{"missing"}}, samples); err == nil {
		t.Error("a chart without points written")
	}
}

func TestHuman(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		series string
		v      float64
		want   string
	}{
		{"rss_bytes:relay-0", 3 << 20, "3.0 MiB"},
		{"table_bytes:outbox", 512, "512 B"},
		{"dead_tuples:outbox", 12345, "12345"},
		{"goroutines:relay-1", 1.5, "1.5"},
	} {
		if got := Human(c.series, c.v); got != c.want {
			t.Errorf("Human(%s, %v) = %q, want %q", c.series, c.v, got, c.want)
		}
	}
}
