package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxrelay/outbox"
)

// W3, commit-to-sink latency. Entries arrive open loop, on a fixed
// schedule whether or not the system keeps up, and are committed by
// latCallers key-affine callers while one relay drains them into the
// counting no-op sink. First the sustainable end-to-end rate is searched
// for (the highest arrival rate at which the appenders and the relay
// together keep the backlog bounded); then the latency is measured at half
// and at a quarter of it. River's W3 points put the same arrivals, at the
// same rates, through River's InsertTx / InsertManyTx and a worker.

const (
	// latCallers commit the arrivals; latMaxPerTx bounds what a caller
	// that is behind commits in one transaction.
	latCallers, latMaxPerTx = 32, 100

	// The sustainable-rate rule (sustainableRule says it in words).
	probeEvery   = 50 * time.Millisecond  // backlog sampling period
	probeShare   = 0.95                   // of the asked arrivals committed in the window
	probeGrowth  = 20 * time.Millisecond  // of arrivals: how much the backlog may grow
	probeCeiling = 100 * time.Millisecond // of arrivals: the backlog's bound

	// The search: from searchFrom/s, doubling up to searchUpTo/s, then
	// Config.ProbeBis bisection steps. A probe prepares all its messages
	// (2.5 s of arrivals in a full run: 1.3M at searchUpTo, ≈ 330 MB of
	// payloads), which bounds searchUpTo.
	searchFrom, searchUpTo = 1000.0, 512000.0

	// riverW3Name is the workload of River's W3 points.
	riverW3Name = "river W3 latency"

	// riverW3DefaultRate stands in for a sustainable rate of ours that
	// this round did not measure (e.g. -only river): River's points then
	// run at half and a quarter of it. It is the order of our backends'
	// rates on a 2-core machine.
	riverW3DefaultRate = 20000.0
)

// sustainableRule is the note of the sustainable-rate figure.
var sustainableRule = fmt.Sprintf("the highest open-loop rate R that passes: after a warm-up of a quarter of the window, ≥ %.0f%% of R committed in the window, and the backlog (committed − delivered, sampled every %s) "+
	"averaged over the window's last third ≤ its first third's + R × %s, and ≤ R × %s in every sample of the last third; "+
	"searched from %.0f/s doubling until a rate fails, then bisecting; counts: every probe's entries", probeShare*100, probeEvery, probeGrowth, probeCeiling, searchFrom)

// River's W3 settings, chosen for its lowest commit-to-work latency. It
// wakes up by LISTEN/NOTIFY (its default, not PollOnly); tried on this
// machine at 3,000 and 6,000 jobs/s, 2-4 runs each:
//   - FetchCooldown 1 ms, River's minimum. It is the least time between
//     two fetches, and between two insert notifications of one client (the
//     inserting client rate-limits its pg_notify by its own FetchCooldown,
//     which is why one client both inserts and works). At 3,000/s p50
//     5-18 ms, against 77-86 ms at the default 100 ms (and 1 s poll).
//   - FetchPollInterval 10 ms: the fallback fetch for a job whose
//     transaction committed inside another's notification window (it sends
//     no notification of its own) after the fetch that one triggered. 1 ms,
//     10 ms and 50 ms measured alike (p99 25-700 ms, from stalls of 100 ms
//     and more whatever the poll); 10 ms bounds the wait for a missed
//     notification without a fetch every millisecond.
//   - MaxWorkers 1000: a fetch takes up to MaxWorkers less the jobs
//     running, so 1000 takes everything available at these rates and no job
//     waits for a worker slot (the no-op worker returns at once). With 100
//     River fell seconds behind at 6,000/s.
//   - A pool of its own of 8 connections, as our Postgres relay has, so
//     its fetches and completions do not queue behind the callers'
//     transactions on the shared pool; 16 measured no better.
const (
	riverW3Cooldown = time.Millisecond
	riverW3Poll     = 10 * time.Millisecond
	riverW3Workers  = 1000
)

// riverW3Settings describes River's W3 settings in its figures' notes.
var riverW3Settings = fmt.Sprintf("LISTEN/NOTIFY, FetchCooldown %s, FetchPollInterval %s, MaxWorkers %d, own 8-connection pool", riverW3Cooldown, riverW3Poll, riverW3Workers)

// roundRate is a sustainable rate and the round that measured it.
type roundRate struct {
	run  int
	rate float64
}

// w3Modes are the latency points of our W3: half of the sustainable rate
// with the backend's wake-ups and with polling only, and a quarter with
// wake-ups, below the knee.
var w3Modes = []struct {
	mode, share, how string
	div              float64
}{
	{"wake", "half", "wake-ups", 2},
	{"poll", "half", "polling only (PollInterval 1s)", 2},
	{"wake4", "a quarter", "wake-ups", 4},
}

// riverW3Points are River's, at the rates of our "wake" and "wake4".
var riverW3Points = []struct {
	point, share string
	div          float64
}{
	{"half", "half", 2},
	{"quarter", "a quarter", 4},
}

// w3: the sustainable end-to-end rate, then the commit-to-sink latency at
// half and a quarter of it.
func (s *Suite) w3(ctx context.Context, t target) error {
	title, sys := t.title, "outbox/"+t.name
	sus := s.sr(t.key + ".lat.sustainable")
	var r float64
	for run := range s.thisRun() {
		var c Counts
		var err error
		if r, c, err = s.sustainableRate(ctx, t, s.noopCarrier, t.name, searchUpTo); err != nil {
			return fmt.Errorf("sustainable rate, run %d: %w", run+1, err)
		}
		sus.add(r, &c)
		s.mu.Lock()
		s.latRate[t.key] = roundRate{run: run, rate: r}
		s.mu.Unlock()
	}
	s.record("ours."+t.key+".lat.sustainable", fmt.Sprintf("%s sustainable end-to-end rate, %d callers, 1 relay, no-op sink", title, latCallers), sys, "entries/s", true, sus, sustainableRule)

	for _, m := range w3Modes {
		mode := m.mode
		arr := r / m.div
		n := min(s.cfg.LatencyN, int(arr*s.cfg.LatencyD.Seconds()))
		asked, got, perTx := s.sr(t.key+".lat.asked."+mode), s.sr(t.key+".lat.rate."+mode), s.sr(t.key+".lat.pertx."+mode)
		p50, p99, pmax := s.sr(t.key+".lat.p50."+mode), s.sr(t.key+".lat.p99."+mode), s.sr(t.key+".lat.max."+mode)
		busy := s.sr(t.key + ".lat.busy." + mode)
		// raw: for Postgres at the wake-up points, the same arrivals as
		// plain inserts alone (rawAppendRun), run right after ours in each
		// round.
		var raw *rawSeries
		if t.name == "postgres" && mode != "poll" {
			raw = &rawSeries{s.sr("raw.pg.lat.rate." + mode), s.sr("raw.pg.lat.pertx." + mode), s.sr("raw.pg.lat.busy." + mode)}
		}
		for run := range s.thisRun() {
			in, err := t.open(ctx, 1)
			if err != nil {
				return err
			}
			store := in.store
			if mode == "poll" {
				store = storeOnly{in.store}
			}
			res, err := s.latencyRun(ctx, t, in, store, s.noopCarrier, n, arr, s.cfg.LatencyD)
			in.close()
			if err != nil {
				s.fail("outbox/%s W3 %s run %d: %v", t.name, mode, run+1, err)
				continue
			}
			res.add(arr, asked, got, perTx, p50, p99, pmax, busy)
			if raw != nil {
				// The same arrivals, in the same round, as plain inserts
				// with nothing to relay them.
				rr, err := s.rawAppendRun(ctx, n, arr, s.cfg.LatencyD)
				if err != nil {
					s.fail("raw/postgres W3 %s run %d: %v", mode, run+1, err)
					continue
				}
				raw.got.add(rr.achieved, &rr.counts)
				raw.perTx.add(rr.perTx, nil)
				if rr.busy >= 0 {
					raw.busy.add(rr.busy, nil)
				}
			}
		}
		w := fmt.Sprintf("%s commit-to-sink, %.0f/s (%s of the sustainable rate, %s)", title, asked.median(), m.share, m.how)
		recordLatency(s, "ours."+t.key+".lat."+mode, w, sys, fmt.Sprintf("at most %d entries or %s per run", n, s.cfg.LatencyD), asked, got, perTx, p50, p99, pmax, busy)
		if raw != nil {
			const rawSys = "raw appenders alone (pgx BEGIN+INSERT+COMMIT, no outbox, no relay)"
			s.record("raw.pg.lat."+mode+".rate", w, rawSys+" arrivals achieved", "entries/s", true, raw.got, fmt.Sprintf("the same %d callers and arrivals; counts: rows in the table", latCallers))
			s.record("raw.pg.lat."+mode+".pertx", w, rawSys+" entries per transaction", "entries", true, raw.perTx, "mean")
			s.record("raw.pg.lat."+mode+".busy", w, rawSys+" machine CPU busy", "%", false, raw.busy, "all cores, while the arrivals ran (/proc/stat)")
		}
	}
	return nil
}

// rawSeries are the figures of the raw appenders alone at one latency
// point: the rate achieved, the entries per transaction, the machine busy.
type rawSeries struct{ got, perTx, busy *series }

// rawAppendRun commits n arrivals at perSec (for at most maxD) as W3's
// callers do, as plain INSERTs into the raw table (one row, or one
// multi-row INSERT for a caller behind its arrivals) in their own
// transactions, with no outbox and no relay: what the appending side
// alone asks of the machine at the rate of a latency point. Its counts
// are the rows the table holds afterwards.
func (s *Suite) rawAppendRun(ctx context.Context, n int, perSec float64, maxD time.Duration) (latRun, error) {
	if err := s.resetRawPG(ctx); err != nil {
		return latRun{}, err
	}
	msgs := newMessages(n, 7)
	o := newOpenLoop(msgs)
	c0 := readCPU("postgres")
	err := o.run(ctx, perSec, maxD, func(ctx context.Context, idx []int) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if len(idx) == 1 {
				i := idx[0]
				_, err := tx.Exec(ctx, rawInsert, outbox.NewID(), msgs.keys[i], msgs.payload[i])
				return err
			}
			ids, keys, payloads := make([]string, len(idx)), make([]string, len(idx)), make([][]byte, len(idx))
			for k, i := range idx {
				ids[k], keys[k], payloads[k] = outbox.NewID(), msgs.keys[i], msgs.payload[i]
			}
			_, err := tx.Exec(ctx, rawInsertMany, ids, keys, payloads)
			return err
		})
	}, nil)
	if err != nil {
		return latRun{}, err
	}
	k, txs := int(o.sent.Load()), int(o.txs.Load())
	if k == 0 {
		return latRun{}, fmt.Errorf("no arrival was committed")
	}
	if self, srv, ok := perEntry(c0, readCPU("postgres"), txs); ok {
		s.logf("   W3 raw appenders alone at %.0f/s: %d transactions (%.2f entries each); CPU per transaction: this process %v, postgres %v; machine busy %.0f%%",
			perSec, txs, float64(k)/float64(txs), self, srv, o.busy)
	}
	if err := s.checkRawRows(ctx, schemaRaw+".entries", k); err != nil {
		return latRun{}, err
	}
	return latRun{
		counts:   Counts{Expected: k, Delivered: k},
		achieved: rate(k, time.Duration(o.last.Load()-o.start.UnixNano())),
		perTx:    float64(k) / float64(txs),
		busy:     o.busy,
	}, nil
}

// recordLatency records the figures of one latency point under prefix.
func recordLatency(s *Suite, prefix, w, sys, note string, asked, got, perTx, p50, p99, pmax, busy *series) {
	s.record(prefix+".p50", w, sys+" p50", "ms", false, p50, note)
	s.record(prefix+".p99", w, sys+" p99", "ms", false, p99, "")
	s.record(prefix+".max", w, sys+" max", "ms", false, pmax, "")
	s.record(prefix+".asked", w, sys+" arrivals asked", "entries/s", true, asked, "per round")
	s.record(prefix+".rate", w, sys+" arrivals achieved", "entries/s", true, got, fmt.Sprintf("%d callers, open loop", latCallers))
	s.record(prefix+".pertx", w, sys+" entries per transaction", "entries", true, perTx, "mean; a caller behind its arrivals commits them together")
	s.record(prefix+".busy", w, sys+" machine CPU busy", "%", false, busy, "all cores, while the arrivals ran (/proc/stat)")
}

// storeOnly hides a Store's optional interfaces (its Notifier), so a relay
// over it can only poll.
type storeOnly struct{ outbox.Store }

// latencyRun runs one W3 measurement: n entries arriving at perSec (for
// at most maxD) with car carrying them from store to the tracker.
func (s *Suite) latencyRun(ctx context.Context, t target, in *instance, store outbox.Store, car carrier, n int, perSec float64, maxD time.Duration) (latRun, error) {
	msgs := newMessages(n, 7)
	tr := newTracker(n)
	topic, stop, err := car(ctx, store, msgs, tr)
	if err != nil {
		return latRun{}, err
	}
	defer stop()
	o := newOpenLoop(msgs)
	c0 := readCPU(t.server)
	if err := o.run(ctx, perSec, maxD, appendCommit(in, msgs, topic), nil); err != nil {
		return latRun{}, err
	}
	if self, srv, ok := perEntry(c0, readCPU(t.server), int(o.sent.Load())); ok {
		s.logf("   W3 %s at %.0f/s: CPU per committed entry: this process (appenders and relay) %v, %s %v; machine busy %.0f%%",
			t.name, perSec, self, t.server, srv, o.busy)
	}
	return o.finish(ctx, tr, 30*time.Second)
}

// carrier starts what carries the entries of a fresh outbox (their topic
// is topic) from store to tr, which marks their arrival: a relay and its
// sink, and for a broker the consumer that reads them from it. The keys
// of the messages m are those of tr's. stop stops it all.
type carrier func(ctx context.Context, store outbox.Store, m *messages, tr *tracker) (topic string, stop func(), err error)

// noopCarrier is W3's: one relay into the counting no-op sink.
func (s *Suite) noopCarrier(ctx context.Context, store outbox.Store, _ *messages, tr *tracker) (string, func(), error) {
	stop, err := s.startRelay(ctx, store, countSink{tr})
	return benchTopic, stop, err
}

// startRelay starts one relay over store into sink and gives it time to
// take its lease; stop stops it.
func (s *Suite) startRelay(ctx context.Context, store outbox.Store, sink outbox.Sink) (stop func(), err error) {
	relay, err := outbox.NewRelay(store, sink, relayOptions(nil))
	if err != nil {
		return nil, err
	}
	if err := relay.Start(ctx); err != nil {
		return nil, err
	}
	// Let the relay take its lease before the clock starts.
	time.Sleep(200 * time.Millisecond)
	return func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := relay.Stop(stopCtx); err != nil {
			s.logf("relay stop: %v", err)
		}
	}, nil
}

// appendCommit appends the messages idx, with topic, to in in one caller
// transaction.
func appendCommit(in *instance, msgs *messages, topic string) func(context.Context, []int) error {
	return func(ctx context.Context, idx []int) error {
		es := make([]outbox.Entry, len(idx))
		for k, i := range idx {
			es[k] = outbox.Entry{Topic: topic, Key: msgs.keys[i], Payload: msgs.payload[i]}
		}
		return in.append(ctx, es)
	}
}

// ---- the sustainable rate ----

// sustainableRate searches for t's sustainable end-to-end rate with car
// carrying the entries (label names it in the log): probes from
// searchFrom/s, doubling until one fails (or upTo passes), then bisecting. The counts add
// up every probe's (each probe fails the search on a loss, a duplicate or
// an order violation).
func (s *Suite) sustainableRate(ctx context.Context, t target, car carrier, label string, upTo float64) (float64, Counts, error) {
	start, probes := time.Now(), 0
	var all Counts
	r, err := searchRate(searchFrom, upTo, s.cfg.ProbeBis, func(rate float64) (bool, error) {
		probes++
		v, c, err := s.probe(ctx, t, car, rate)
		all.Expected += c.Expected
		all.Delivered += c.Delivered
		all.Duplicates += c.Duplicates
		all.Foreign += c.Foreign
		all.OrderViolations += c.OrderViolations
		if err != nil {
			return false, fmt.Errorf("probe at %.0f/s: %w", rate, err)
		}
		s.logf("   W3 %s probe %7.0f/s: %s", label, rate, v)
		return v.ok, nil
	})
	if err != nil {
		return 0, all, err
	}
	s.logf("   W3 %s: sustainable %.0f/s (%d probes, windows of %s, %s in all)", label, r, probes, s.cfg.ProbeD, time.Since(start).Round(100*time.Millisecond))
	return r, all, nil
}

// searchRate returns the highest rate probe accepts: it probes from,
// 2×from, 4×from, … until a rate is refused (or upTo is accepted), then
// bisects steps times between the last accepted and the first refused
// rate (midpoints rounded to 100/s). It fails when no rate is accepted.
func searchRate(from, upTo float64, steps int, probe func(rate float64) (bool, error)) (float64, error) {
	lo, hi := 0.0, 0.0
	for r := from; r <= upTo; r *= 2 {
		ok, err := probe(r)
		if err != nil {
			return 0, err
		}
		if !ok {
			hi = r
			break
		}
		lo = r
	}
	if hi == 0 {
		return lo, nil
	}
	for range steps {
		mid := math.Round((lo+hi)/2/100) * 100
		if mid <= lo || mid >= hi {
			break
		}
		ok, err := probe(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return 0, fmt.Errorf("not even %.0f/s is sustainable", hi)
	}
	return lo, nil
}

// probe runs arrivals at perSec into a fresh outbox of t, with one relay
// draining into the counting sink: a warm-up of a quarter of
// Config.ProbeD (the pool's connections, the new table's statements, the
// relay's first claims), then the judged window of Config.ProbeD, in
// which it samples the backlog every probeEvery. It then waits for every
// committed entry, checks the counts and judges the window by the
// sustainable-rate rule.
func (s *Suite) probe(ctx context.Context, t target, car carrier, perSec float64) (probeVerdict, Counts, error) {
	window := s.cfg.ProbeD
	warm := (window / 4).Truncate(probeEvery)
	n := max(1, int(perSec*(warm+window).Seconds()))
	in, err := t.open(ctx, 1)
	if err != nil {
		return probeVerdict{}, Counts{}, err
	}
	defer in.close()
	msgs := newMessages(n, 11)
	tr := newTracker(n)
	topic, stop, err := car(ctx, in.store, msgs, tr)
	if err != nil {
		return probeVerdict{}, Counts{}, err
	}
	defer stop()
	o := newOpenLoop(msgs)
	type point struct {
		at            time.Duration
		sent, backlog int64
	}
	var pts []point // appended by the sampler only; read after run
	err = o.run(ctx, perSec, warm+window, appendCommit(in, msgs, topic), func() {
		// Delivered is read after committed, and an entry is delivered
		// only once committed, so the difference never overstates the
		// backlog; it understates it (down to below 0, counted as 0) by
		// the entries delivered before their caller counted them.
		sent := o.sent.Load()
		pts = append(pts, point{time.Since(o.start), sent, max(0, sent-tr.unique.Load())})
	})
	if err != nil {
		return probeVerdict{}, Counts{}, err
	}
	// The window starts at the first sample after the warm-up.
	var backlog []int64
	var from point
	for _, p := range pts {
		if p.at < warm {
			continue
		}
		if backlog == nil {
			from = p
		}
		backlog = append(backlog, p.backlog)
	}
	var achieved float64
	if backlog != nil {
		achieved = rate(int(o.sent.Load()-from.sent), warm+window-from.at)
	}
	res, err := o.finish(ctx, tr, drainTimeout(n))
	if err != nil {
		return probeVerdict{}, res.counts, err
	}
	v := judgeProbe(perSec, achieved, backlog)
	v.p99 = percentile(sortedMS(res.lat), 99)
	return v, res.counts, nil
}

// probeVerdict is the judgement of one probe.
type probeVerdict struct {
	asked, achieved float64 // entries/s
	first, last     float64 // mean backlog over the window's first and last third
	peak            int64   // largest backlog in the last third
	samples         int
	p99             float64 // commit-to-sink p99 of the probe (ms), for the log
	ok              bool
	why             []string // the rule's parts that failed
}

func (v probeVerdict) String() string {
	verdict := "sustainable"
	if !v.ok {
		verdict = "NOT sustainable: " + strings.Join(v.why, "; ")
	}
	return fmt.Sprintf("achieved %7.0f/s (%3.0f%%), backlog first third %7.0f, last third %7.0f (max %d; bound %.0f), %d samples, p99 %.1f ms: %s",
		v.achieved, 100*v.achieved/v.asked, v.first, v.last, v.peak, v.asked*probeCeiling.Seconds(), v.samples, v.p99, verdict)
}

// judgeProbe applies the sustainable-rate rule to a probe at asked
// entries/s that committed achieved entries/s and whose backlog samples
// (in order, every probeEvery) are backlog. A probe passes when
//
//   - achieved ≥ probeShare × asked (the appenders kept up), and
//   - the backlog is not growing: its mean over the last third of the
//     samples is at most its mean over the first third plus probeGrowth
//     of arrivals (asked × probeGrowth entries), and
//   - the backlog is bounded: no sample of the last third exceeds
//     probeCeiling of arrivals.
//
// Fewer than 3 samples fail.
func judgeProbe(asked, achieved float64, backlog []int64) probeVerdict {
	v := probeVerdict{asked: asked, achieved: achieved, samples: len(backlog)}
	third := len(backlog) / 3
	if third == 0 {
		v.why = []string{fmt.Sprintf("%d backlog samples, fewer than 3", len(backlog))}
		return v
	}
	lastThird := backlog[len(backlog)-third:]
	v.first, v.last, v.peak = mean(backlog[:third]), mean(lastThird), slices.Max(lastThird)
	if achieved < probeShare*asked {
		v.why = append(v.why, fmt.Sprintf("arrivals %.0f%% of the rate asked (< %.0f%%)", 100*achieved/asked, 100*probeShare))
	}
	if growth := asked * probeGrowth.Seconds(); v.last > v.first+growth {
		v.why = append(v.why, fmt.Sprintf("backlog grew by %.0f (> %.0f, %s of arrivals)", v.last-v.first, growth, probeGrowth))
	}
	if ceiling := asked * probeCeiling.Seconds(); float64(v.peak) > ceiling {
		v.why = append(v.why, fmt.Sprintf("backlog reached %d (> %.0f, %s of arrivals)", v.peak, ceiling, probeCeiling))
	}
	v.ok = len(v.why) == 0
	return v
}

func mean(vs []int64) float64 {
	var sum float64
	for _, v := range vs {
		sum += float64(v)
	}
	return sum / float64(len(vs))
}

// ---- the arrivals ----

// openLoop is W3's arrival scheme: message i arrives i/perSec after the
// start and goes to the caller that owns its key (latCallers key-affine
// callers, so a key's append order is its message order). A caller that
// keeps up commits one transaction per arrival; one that is behind
// commits everything that has arrived for it (up to latMaxPerTx) in one
// transaction, as a service batching its writes would, so the entries
// arrive at the rate asked even where single-entry transactions cannot
// reach it.
type openLoop struct {
	msgs     *messages
	commitAt []atomic.Int64 // unix ns when the message's transaction committed
	sent     atomic.Int64   // messages committed
	txs      atomic.Int64   // transactions committed
	last     atomic.Int64   // unix ns of the last commit
	start    time.Time
	busy     float64 // the machine's CPU busy while run ran, % (-1: unknown)
}

func newOpenLoop(msgs *messages) *openLoop {
	return &openLoop{msgs: msgs, commitAt: make([]atomic.Int64, len(msgs.keys))}
}

// run feeds the messages at perSec, for at most maxD, to the callers;
// commit commits the messages idx in one transaction (it must not keep
// idx). Arrivals a caller takes up after maxD are dropped, not committed.
// sample, when not nil, is called every probeEvery from one goroutine
// until the arrivals end. run returns once every caller is done, with the
// first commit error.
func (o *openLoop) run(ctx context.Context, perSec float64, maxD time.Duration, commit func(ctx context.Context, idx []int) error, sample func()) error {
	n := len(o.msgs.keys)
	perLane := make([]int, latCallers)
	for _, k := range o.msgs.keys {
		perLane[keyLane(k, latCallers)]++
	}
	jobs := make([]chan int, latCallers)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	o.start = time.Now()
	b0 := readBusy()
	defer func() { o.busy = b0.to(readBusy()) }()
	deadline := o.start.Add(maxD)
	for w := range latCallers {
		jobs[w] = make(chan int, perLane[w])
		wg.Go(func() {
			batch := make([]int, 0, latMaxPerTx)
			for i := range jobs[w] {
				batch = append(batch[:0], i)
			more:
				for len(batch) < latMaxPerTx {
					select {
					case j, ok := <-jobs[w]:
						if !ok {
							break more
						}
						batch = append(batch, j)
					default:
						break more
					}
				}
				if time.Now().After(deadline) {
					continue // past the run's duration: arrivals the callers could not take in time
				}
				if err := commit(ctx, batch); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				now := time.Now().UnixNano()
				for _, j := range batch {
					o.commitAt[j].Store(now)
				}
				o.sent.Add(int64(len(batch)))
				o.txs.Add(1)
				for old := o.last.Load(); now > old && !o.last.CompareAndSwap(old, now); old = o.last.Load() {
				}
			}
		})
	}
	fed := make(chan struct{})
	if sample != nil {
		wg.Go(func() {
			tick := time.NewTicker(probeEvery)
			defer tick.Stop()
			for {
				select {
				case <-fed:
					return
				case now := <-tick.C:
					if now.After(deadline) {
						return
					}
					sample()
				}
			}
		})
	}
	interval := time.Duration(float64(time.Second) / perSec)
	for i := range n {
		if ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		if d := time.Until(o.start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs[keyLane(o.msgs.keys[i], latCallers)] <- i
	}
	close(fed)
	for _, j := range jobs {
		close(j)
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		return *err
	}
	return ctx.Err()
}

// latRun is the outcome of one latency run.
type latRun struct {
	lat      []time.Duration // commit-to-delivery, per committed message
	counts   Counts
	achieved float64 // committed entries/s, from the start to the last commit
	perTx    float64 // mean entries per transaction
	busy     float64 // the machine's CPU busy while the arrivals ran, % (-1: unknown)
}

// add adds the run's figures to the series of its latency point.
func (r latRun) add(asked float64, askedS, got, perTx, p50, p99, pmax, busy *series) {
	ms := sortedMS(r.lat)
	askedS.add(asked, nil)
	got.add(r.achieved, nil)
	perTx.add(r.perTx, nil)
	p50.add(percentile(ms, 50), &r.counts)
	p99.add(percentile(ms, 99), nil)
	pmax.add(ms[len(ms)-1], nil)
	if r.busy >= 0 {
		busy.add(r.busy, nil)
	}
}

// finish waits until tr has every committed message (for at most
// timeout), checks the counts (no loss, no duplicate, nothing foreign, per-key order) and
// returns the run's figures.
func (o *openLoop) finish(ctx context.Context, tr *tracker, timeout time.Duration) (latRun, error) {
	k := int(o.sent.Load())
	if k == 0 {
		return latRun{}, fmt.Errorf("no arrival was committed")
	}
	r := latRun{achieved: rate(k, time.Duration(o.last.Load()-o.start.UnixNano())), perTx: float64(k) / float64(o.txs.Load()), busy: o.busy}
	werr := tr.waitN(ctx, k, timeout)
	r.counts = tr.counts_()
	r.counts.Expected = k
	if werr != nil {
		return r, werr
	}
	if err := r.counts.check(false); err != nil {
		return r, err
	}
	r.lat = make([]time.Duration, 0, k)
	for i := range o.commitAt {
		if at := o.commitAt[i].Load(); at != 0 {
			r.lat = append(r.lat, max(0, time.Duration(tr.recvAt[i].Load()-at)))
		}
	}
	return r, nil
}

// ---- River at the same arrival rates ----

// riverLatArgs is the job of River's W3 points: the message's sequence
// number, key and 256-byte body.
type riverLatArgs struct {
	Seq     int    `json:"s"`
	Key     string `json:"k"`
	Payload string `json:"p"`
}

func (riverLatArgs) Kind() string { return "bench_latency" }

// riverLatWorker marks the message of each job it works; the time it was
// worked is then set against its caller's commit.
type riverLatWorker struct {
	river.WorkerDefaults[riverLatArgs]
	tr *tracker
}

func (w *riverLatWorker) Work(_ context.Context, job *river.Job[riverLatArgs]) error {
	if seq, _, err := parsePayload([]byte(job.Args.Payload)); err != nil || seq != job.Args.Seq {
		w.tr.mark(-1) // counted as foreign
		return nil
	}
	w.tr.mark(job.Args.Seq)
	return nil
}

// onlyNamesOurW3 reports whether -only names the W3 of one of our
// backends ("postgres W3"), which River's W3 points then go with.
func (s *Suite) onlyNamesOurW3() bool {
	if s.cfg.Only == nil {
		return false
	}
	for _, t := range []target{s.postgresTarget(), s.redisTarget()} {
		sub := t.name + " W3 latency"
		if s.cfg.Only.MatchString(sub) && !s.skipped(sub) && !s.skipped("outbox/"+t.name) {
			return true
		}
	}
	return false
}

// riverW3: River's commit-to-work latency at our backends' half and
// quarter points of this round. The points of a backend whose W3 does not
// run in this run are left out, unless none runs (-only river): then
// both backends' points run at riverW3DefaultRate.
func (s *Suite) riverW3(ctx context.Context) error {
	var ts []target
	all := []target{s.postgresTarget(), s.redisTarget()}
	for _, t := range all {
		if s.selectedWorkload(workload{name: "outbox/" + t.name}) && s.oursSelected(t.name, t.name+" W3 latency") {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		ts = all
	}
	if err := s.resetRiver(ctx); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	defer func() {
		if _, err := s.pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schemaRiver+" CASCADE"); err != nil {
			s.logf("cleanup: dropping schema %s: %v", schemaRiver, err)
		}
	}()
	for _, t := range ts {
		s.mu.Lock()
		rr, ok := s.latRate[t.key]
		s.mu.Unlock()
		r, of := rr.rate, "outbox/"+t.name+"'s sustainable rate"
		if !ok || rr.run != s.run {
			r, of = riverW3DefaultRate, fmt.Sprintf("the default %.0f/s: outbox/%s's rate not measured", riverW3DefaultRate, t.name)
			s.logf("   River W3: no sustainable rate of outbox/%s measured in this round; River's %s points use the default, %.0f/s", t.name, t.title, r)
		}
		for _, p := range riverW3Points {
			arr := r / p.div
			n := min(s.cfg.LatencyN, int(arr*s.cfg.LatencyD.Seconds()))
			prefix := "river.lat." + t.key + "." + p.point
			asked, got, perTx := s.sr(prefix+".asked"), s.sr(prefix+".rate"), s.sr(prefix+".pertx")
			p50, p99, pmax := s.sr(prefix+".p50"), s.sr(prefix+".p99"), s.sr(prefix+".max")
			busy := s.sr(prefix + ".busy")
			for run := range s.thisRun() {
				if _, err := s.pool.Exec(ctx, "TRUNCATE "+schemaRiver+".river_job"); err != nil {
					return err
				}
				res, err := s.riverLatencyRun(ctx, n, arr, s.cfg.LatencyD)
				if err != nil {
					s.fail("river W3 at %s's %s point, run %d: %v", t.title, p.point, run+1, err)
					continue
				}
				res.add(arr, asked, got, perTx, p50, p99, pmax, busy)
			}
			w := fmt.Sprintf("River commit-to-work, %.0f/s (%s of %s)", asked.median(), p.share, of)
			recordLatency(s, prefix, w, "River", fmt.Sprintf("at most %d entries or %s per run; %s", n, s.cfg.LatencyD, riverW3Settings), asked, got, perTx, p50, p99, pmax, busy)
		}
	}
	return nil
}

// riverLatencyRun runs one River W3 measurement: n jobs arriving at
// perSec (for at most maxD) through the 32 callers, each inserted in the
// caller's own transaction (InsertTx; a caller behind its arrivals
// inserts them with one InsertManyTx), worked by a no-op worker.
func (s *Suite) riverLatencyRun(ctx context.Context, n int, perSec float64, maxD time.Duration) (latRun, error) {
	msgs := newMessages(n, 7)
	args := make([]riverLatArgs, n)
	for i := range n {
		args[i] = riverLatArgs{Seq: i, Key: msgs.keys[i], Payload: string(msgs.payload[i])}
	}
	tr := newTracker(n)
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &riverLatWorker{tr: tr}); err != nil {
		return latRun{}, err
	}
	pcfg := s.pool.Config().Copy()
	pcfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return latRun{}, err
	}
	defer pool.Close()
	// One client works the jobs and inserts them: its inserts' pg_notify
	// is rate-limited by its own FetchCooldown.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            schemaRiver,
		Logger:            quietLogger(),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverW3Workers}},
		Workers:           workers,
		FetchCooldown:     riverW3Cooldown,
		FetchPollInterval: riverW3Poll,
	})
	if err != nil {
		return latRun{}, fmt.Errorf("river client: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return latRun{}, fmt.Errorf("river start: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			s.logf("river stop: %v", err)
		}
	}()
	// Let the client listen and elect itself before the clock starts, as
	// our relay takes its lease.
	time.Sleep(200 * time.Millisecond)
	o := newOpenLoop(msgs)
	err = o.run(ctx, perSec, maxD, func(ctx context.Context, idx []int) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if len(idx) == 1 {
				_, err := client.InsertTx(ctx, tx, args[idx[0]], nil)
				return err
			}
			params := make([]river.InsertManyParams, len(idx))
			for k, i := range idx {
				params[k] = river.InsertManyParams{Args: args[i]}
			}
			_, err := client.InsertManyTx(ctx, tx, params)
			return err
		})
	}, nil)
	if err != nil {
		return latRun{}, err
	}
	// River may fall far behind at our rates: give it the time a drain
	// of everything committed takes at the slowest.
	return o.finish(ctx, tr, drainTimeout(int(o.sent.Load())))
}
