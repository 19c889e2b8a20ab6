package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// MySQL has no LISTEN/NOTIFY: a relay learns of appends by polling, or
// from an in-process wake-up when the appender runs in its process. This
// workload measures, at several poll intervals, what a relay's polling
// costs the server when there is nothing to do, and the commit-to-sink
// latency with and without the wake-up.

// mysqlPollIntervals are the poll intervals measured; the backend's
// default is added when it is not one of them.
var mysqlPollIntervals = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second}

// pollIntervals are the intervals a run measures: with -quick only the
// shortest and the backend's default.
func (s *Suite) pollIntervals() []time.Duration {
	if s.cfg.Quick {
		return []time.Duration{mysqlPollIntervals[0], mysqloutbox.DefaultPollInterval}
	}
	return pollIntervals()
}

func pollIntervals() []time.Duration {
	ivs := slices.Clone(mysqlPollIntervals)
	if !slices.Contains(ivs, mysqloutbox.DefaultPollInterval) {
		ivs = append(ivs, mysqloutbox.DefaultPollInterval)
		slices.Sort(ivs)
	}
	return ivs
}

// The latency runs: one caller appends one entry per transaction at
// latRate per second, latN entries per run (latNQuick with -quick), into
// an outbox of mysqlPartitions partitions drained by one relay.
const (
	latRate   = 50
	latN      = 250
	latNQuick = 50
)

// idleWindow is how long the idle cost is counted per interval (at least
// ten polls).
func idleWindow(iv time.Duration, quick bool) time.Duration {
	w := 5 * time.Second
	if quick {
		w = 2 * time.Second
	}
	return max(w, 10*iv)
}

func ivName(iv time.Duration) string { return iv.String() }

// mysqlLatency runs one round of the polling workload: the idle cost on a
// private server at every interval, then the latencies on the shared one.
func (s *Suite) mysqlLatency(ctx context.Context, c *mysqlConn) error {
	if err := s.mysqlIdleCost(ctx); err != nil {
		return fmt.Errorf("idle cost: %w", err)
	}
	n := latN
	if s.cfg.Quick {
		n = latNQuick
	}
	msgs := newMessages(n, 25)
	for _, iv := range s.pollIntervals() {
		for _, wake := range []bool{false, true} {
			if err := s.mysqlLatencyRun(ctx, c, msgs, iv, wake); err != nil {
				return fmt.Errorf("PollInterval %s, wake-ups %v: %w", iv, wake, err)
			}
		}
	}
	for _, iv := range s.pollIntervals() {
		for _, wake := range []bool{false, true} {
			key, sys := latKey(iv, wake)
			w := fmt.Sprintf("MySQL commit-to-sink latency, %d appends/s, %d partitions, PollInterval %s", latRate, mysqlPartitions, ivName(iv))
			for _, p := range []string{"p50", "p99", "max"} {
				s.record(key+"."+p, w, sys+" "+p, "ms", false, s.sr(key+"."+p), "")
			}
		}
		s.record(idleKey(iv), fmt.Sprintf("MySQL idle relay, PollInterval %s", ivName(iv)), "outbox/mysql relay, server queries per partition", "queries/s", false, s.sr(idleKey(iv)),
			fmt.Sprintf("%d partitions, empty outbox, private mariadbd, SHOW GLOBAL STATUS 'Questions' deltas", mysqlPartitions))
		s.record(idleKey(iv)+".cpu", fmt.Sprintf("MySQL idle relay, PollInterval %s", ivName(iv)), "outbox/mysql relay, server CPU per partition", "ms CPU/s", false, s.sr(idleKey(iv)+".cpu"),
			fmt.Sprintf("%d partitions, empty outbox, private mariadbd, /proc/PID/stat, less the baseline", mysqlPartitions))
	}
	return nil
}

func latKey(iv time.Duration, wake bool) (key, sys string) {
	if wake {
		return "ours.my.lat.wake." + ivName(iv), "outbox/mysql relay, in-process wake-ups"
	}
	return "ours.my.lat.poll." + ivName(iv), "outbox/mysql relay, polling only"
}

func idleKey(iv time.Duration) string { return "ours.my.idle." + ivName(iv) }

// mysqlLatencyRun appends msgs one per transaction at latRate per second
// into a fresh outbox drained by one relay with PollInterval iv; with
// wake, the appender wakes the relay after each commit (the backend's
// in-process Notify); without, NoNotify leaves the relay to its polls.
// Latency = the sink's receipt − the Commit return.
func (s *Suite) mysqlLatencyRun(ctx context.Context, c *mysqlConn, msgs *messages, iv time.Duration, wake bool) error {
	n := len(msgs.keys)
	in, err := c.openOurs(ctx, c.db, c.dsn, mysqlPartitions, func(o *mysqloutbox.Options) { o.NoNotify = !wake })
	if err != nil {
		return err
	}
	defer in.close()
	b := in.store.(*mysqloutbox.Backend)
	tr := newTracker(n)
	r, err := outbox.NewRelay(b, countSink{tr}, relayOptions(func(o *outbox.RelayOptions) { o.PollInterval = iv }))
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = r.Stop(stopCtx)
	}()
	// The relay takes its leases first: the runs measure a relay at work.
	time.Sleep(max(500*time.Millisecond, 2*iv))

	committed := make([]int64, n)
	tick := time.NewTicker(time.Second / latRate)
	defer tick.Stop()
	for i := range n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		e := outbox.Entry{Topic: benchTopic, Key: msgs.keys[i], Payload: msgs.payload[i]}
		if err := mysqlAppendOne(ctx, c.db, b, e, wake); err != nil {
			return err
		}
		committed[i] = time.Now().UnixNano()
	}
	if err := tr.wait(ctx, 30*time.Second+10*iv); err != nil {
		return err
	}
	cn := tr.counts_()
	if err := cn.check(false); err != nil {
		return err
	}
	lat := make([]time.Duration, n)
	for i := range n {
		lat[i] = time.Duration(tr.recvAt[i].Load() - committed[i])
	}
	ms := sortedMS(lat)
	key, _ := latKey(iv, wake)
	s.sr(key+".p50").add(percentile(ms, 50), &cn)
	s.sr(key+".p99").add(percentile(ms, 99), nil)
	s.sr(key+".max").add(ms[len(ms)-1], nil)
	s.logf("   mysql PollInterval %s wake-ups %v: p50 %.1f ms, p99 %.1f ms, max %.1f ms", iv, wake, percentile(ms, 50), percentile(ms, 99), ms[len(ms)-1])
	return nil
}

// mysqlIdleCost counts, on a private mariadbd that nothing else uses, the
// statements a relay with nothing to do sends per second and partition at
// each poll interval: the server's Questions delta over a window, less
// the window's own SHOW STATUS, divided by the window and the partitions.
// Without mariadbd on the PATH the figures are left out, with a message.
func (s *Suite) mysqlIdleCost(ctx context.Context) error {
	priv, err := startPrivateMariaDB(ctx)
	if errors.Is(err, exec.ErrNotFound) {
		s.logf("mysql idle cost: no mariadbd or mariadb-install-db on the PATH (%v): its rows are skipped", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer priv.stop()
	pc := &mysqlConn{db: priv.db, dsn: priv.dsn}
	questions := func() (int64, error) {
		var name string
		var v int64
		err := priv.db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v)
		return v, err
	}
	// The baseline: what the window costs with no relay at all (the
	// SHOW STATUS of the window and anything the server does by itself).
	window := idleWindow(0, s.cfg.Quick)
	bc0, _ := priv.cpu()
	q0, err := questions()
	if err != nil {
		return err
	}
	time.Sleep(window)
	q1, err := questions()
	if err != nil {
		return err
	}
	bc1, _ := priv.cpu()
	base := float64(q1-q0) / window.Seconds()
	baseCPU := float64(bc1-bc0) / float64(time.Millisecond) / window.Seconds()
	s.logf("   mysql idle cost: baseline %.2f questions/s, server CPU %.2f ms/s with no relay", base, baseCPU)
	for _, iv := range s.pollIntervals() {
		in, err := pc.openOurs(ctx, priv.db, priv.dsn, mysqlPartitions, nil)
		if err != nil {
			return err
		}
		r, err := outbox.NewRelay(in.store, countSink{newTracker(0)}, relayOptions(func(o *outbox.RelayOptions) { o.PollInterval = iv }))
		if err == nil {
			err = r.Start(ctx)
		}
		if err != nil {
			in.close()
			return err
		}
		// Settle: the relay takes its leases and heartbeats once.
		time.Sleep(2*time.Second + 2*iv)
		w := idleWindow(iv, s.cfg.Quick)
		c0, cok0 := priv.cpu()
		q0, err := questions()
		if err == nil {
			time.Sleep(w)
			q1, err = questions()
		}
		c1, cok1 := priv.cpu()
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = r.Stop(stopCtx)
		cancel()
		in.close()
		if err != nil {
			return err
		}
		perPart := (float64(q1-q0)/w.Seconds() - base) / mysqlPartitions
		s.sr(idleKey(iv)).add(perPart, nil)
		cpuNote := ""
		if cok0 && cok1 {
			// Server CPU per second per partition, less the baseline's.
			ms := (float64(c1-c0)/float64(time.Millisecond)/w.Seconds() - baseCPU) / mysqlPartitions
			s.sr(idleKey(iv)+".cpu").add(ms, nil)
			cpuNote = fmt.Sprintf(", server CPU %.2f ms/s per partition", ms)
		}
		s.logf("   mysql idle cost, PollInterval %s: %.2f queries/s per partition (%d questions in %s, %d partitions)%s", iv, perPart, q1-q0, w, mysqlPartitions, cpuNote)
	}
	return nil
}

// mysqlAppendOne appends e with b, the relay's backend, in a transaction
// of db and commits it: with wake through b's InTx, which then wakes the
// relays of b (Backend.Notify of e's partition), as a service that runs
// its relay in-process would; without, in a plain transaction (the relay
// polls), as an appender in another process would.
func mysqlAppendOne(ctx context.Context, db *sql.DB, b *mysqloutbox.Backend, e outbox.Entry, wake bool) error {
	fn := func(tx *sql.Tx) error { return b.AppendInTx(ctx, tx, e) }
	if wake {
		return b.InTx(ctx, db, fn)
	}
	return inTx(ctx, db, fn)
}
