package move_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/move"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// The end-to-end move under load: services append throughout, both
// outboxes' relays run, the mover is cancelled mid-run and run again, and
// what the broker holds is checked against what was committed.
//
// Timeline of one scenario (from the start of the appenders):
//
//	0 s      six appenders append to the source, three entries of their
//	         own keys per transaction; poison entries were appended to it
//	         just before (the source relay parks them); both relays run,
//	         the destination's held by Prepare; the source relay lags on
//	         purpose (its sink is slowed), so a backlog waits in the source
//	1-2.6 s  five appenders switch to the destination one by one; the
//	         sixth (the straggler) stays on the source until an append
//	         fails with ErrSealed, then appends those entries to the
//	         destination
//	~2.8 s   the source relay is stopped; scheduled entries (NotBefore
//	         1-3 s ahead) are appended to the source; Run seals it, is
//	         cancelled once one source partition is moved, and is run
//	         again to the end
//	then     appenders stop 0.5 s after the move; the destination drains;
//	         the topic is read back and the history checked
const (
	e2eTopic      = "orders"
	e2eAppenders  = 6 // the last one is the straggler
	e2eKeys       = 5 // per appender
	e2ePerTx      = 3 // entries per transaction
	e2ePace       = 4 * time.Millisecond
	e2eFirstSwap  = time.Second
	e2eSwapStep   = 400 * time.Millisecond
	e2ePoison     = 8
	e2eScheduled  = 10
	e2eMoveBatch  = 50
	e2eSlowSource = 250 * time.Millisecond // per Publish call of the source relay
)

func TestMoveEndToEndUnderLoad(t *testing.T) {
	for _, sc := range []struct {
		name     string
		from, to newEnd
		fromN    int
		toN      int
	}{
		{"MemoryToMemory", memoryEnd, memoryEnd, 4, 4},
		{"PostgresToRedis", postgresEnd, redisEnd, 4, 4},
		{"RedisToPostgres", redisEnd, postgresEnd, 4, 4},
		{"Postgres4To16", postgresEnd, postgresEnd, 4, 16},
		{"Redis4To16", redisEnd, redisEnd, 4, 16},
		{"PostgresToMySQL", postgresEnd, mysqlEnd, 4, 4},
		{"MySQLToRedis", mysqlEnd, redisEnd, 4, 4},
		{"MySQL4To16", mysqlEnd, mysqlEnd, 4, 16},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			from, to := sc.from(t, sc.fromN), sc.to(t, sc.toN)
			requireMovable(t, from, to)
			runMoveUnderLoad(t, from, to)
		})
	}
}

// slowSink delays every Publish call, so the source relay lags behind
// the appenders and the move finds a backlog. Embedding keeps the
// Kafka sink's optional interfaces (KeepsKeyOrder, LandingBound).
type slowSink struct {
	*kafkasink.Sink
	delay time.Duration
}

func (s slowSink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return s.Sink.Publish(ctx, msgs)
}

// poisonTopic maps an entry with a "poison" header to no topic: the sink
// fails it permanently and the relay parks it.
func poisonTopic(e outbox.Entry) string {
	if e.Headers["poison"] != "" {
		return ""
	}
	return e.Topic
}

func startRelay(t *testing.T, ctx context.Context, c *kfake.Cluster, store outbox.Store, slow time.Duration, batch int) *outbox.Relay {
	t.Helper()
	ks, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{Topic: poisonTopic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ks.Close() })
	var sink outbox.Sink = ks
	if slow > 0 {
		sink = slowSink{Sink: ks, delay: slow}
	}
	r, err := outbox.NewRelay(store, sink, outbox.RelayOptions{
		BatchSize: batch, MaxInFlight: batch, PollInterval: 50 * time.Millisecond,
		LeaseTTL: 30 * time.Second, StatsInterval: -1,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(ctx)
	})
	return r
}

// e2eAppender appends to its own keys, one entry per transaction, with a
// per-key sequence number, to the source until its switch time, then to
// the destination. An append that fails with ErrSealed on the source is
// appended to the destination (same ID): the straggler's switch. Only
// confirmed commits are recorded.
type e2eAppender struct {
	i        int
	switchAt time.Duration // < 0: switch only on ErrSealed
	from, to e2eEnd
	h        *history.History

	onDest          bool
	commits         int // on the source, on the destination
	commitsDest     int
	sealed          int // appends refused with ErrSealed
	otherErrs       int
	lastErr         error
	sourceAfterSeal int // appends to the source confirmed after it reported sealed
}

func (a *e2eAppender) run(ctx context.Context, start time.Time, stop <-chan struct{}, sealedAt *atomic.Pointer[time.Time]) {
	seqs := map[string]int64{}
	tick := time.NewTicker(e2ePace)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if !a.onDest && a.switchAt >= 0 && time.Since(start) >= a.switchAt {
			a.onDest = true
		}
		// One transaction of e2ePerTx entries, each on the appender's
		// next key.
		var entries []outbox.Entry
		var recs []history.Entry
		for j := range e2ePerTx {
			k := n*e2ePerTx + j
			key := fmt.Sprintf("a%d-k%d", a.i, k%e2eKeys)
			seq := seqs[key] + 1
			seqs[key] = seq
			entries = append(entries, outbox.Entry{ID: fmt.Sprintf("a%d-%d", a.i, k), Topic: e2eTopic, Key: key,
				Payload: fmt.Appendf(nil, `{"key":%q,"seq":%d}`, key, seq), Headers: map[string]string{"seq": fmt.Sprint(seq)}})
			recs = append(recs, history.Entry{ID: entries[j].ID, Key: key, Seq: seq})
		}
		for attempt := 0; ; attempt++ {
			end := a.from
			if a.onDest {
				end = a.to
			}
			err := end.append(ctx, entries...)
			if err == nil {
				if a.onDest {
					a.commitsDest += len(entries)
				} else {
					a.commits += len(entries)
					if s := sealedAt.Load(); s != nil && s.Before(time.Now()) {
						// Returned after the mover logged the seal: fine
						// if it committed before Seal returned (the
						// history checks it is delivered).
						a.sourceAfterSeal++
					}
				}
				break
			}
			if !a.onDest && errors.Is(err, outbox.ErrSealed) {
				a.sealed++
				a.onDest = true
				continue // the same entries, to the destination
			}
			a.otherErrs++
			a.lastErr = err
			if ctx.Err() != nil || attempt == 20 {
				for _, r := range recs {
					a.h.Unknown(r)
				}
				return
			}
			time.Sleep(20 * time.Millisecond) // the same IDs again: idempotent
		}
		now := time.Now()
		for _, r := range recs {
			r.At = now
			a.h.Append(r)
		}
	}
}

func runMoveUnderLoad(t *testing.T, from, to e2eEnd) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, e2eTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	opts := move.Options{SourceName: "e2e " + from.kind + " " + t.Name(), Batch: e2eMoveBatch, Workers: 2,
		LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond}
	if _, err := move.Prepare(ctx, from.store, to.store, opts); err != nil {
		t.Fatal(err)
	}
	srcRelay := startRelay(t, ctx, c, from.store, e2eSlowSource, 4)
	startRelay(t, ctx, c, to.store, 0, 200)

	var h history.History
	// Poison entries, one key each: the source relay parks them.
	poison := make([]string, e2ePoison)
	for i := range poison {
		poison[i] = fmt.Sprintf("poison-%d", i)
		e := outbox.Entry{ID: poison[i], Topic: e2eTopic, Key: poison[i], Payload: []byte("poison"), Headers: map[string]string{"poison": "1"}}
		if err := from.append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	stop := make(chan struct{})
	var sealedAt atomic.Pointer[time.Time]
	apps := make([]*e2eAppender, e2eAppenders)
	var wg sync.WaitGroup
	for i := range apps {
		sw := e2eFirstSwap + time.Duration(i)*e2eSwapStep
		if i == e2eAppenders-1 {
			sw = -1
		}
		apps[i] = &e2eAppender{i: i, switchAt: sw, from: from, to: to, h: &h}
		wg.Go(func() { apps[i].run(ctx, start, stop, &sealedAt) })
	}
	stopAppenders := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopAppenders)

	// Wait for the last voluntary switch, and for the source relay to park
	// the poison entries.
	time.Sleep(time.Until(start.Add(e2eFirstSwap + (e2eAppenders-1)*e2eSwapStep + 200*time.Millisecond)))
	waitFor(t, ctx, 15*time.Second, "the source relay to park the poison entries", func() (bool, string) {
		c, err := move.Count(ctx, from.store)
		if err != nil {
			t.Fatal(err)
		}
		return c.Parked == e2ePoison, c.String()
	})
	srcLook := from.store.(outbox.Looker)
	poisonWas := map[string]outbox.EntryInfo{}
	for _, id := range poison {
		info, err := srcLook.Lookup(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Parked || info.Attempts == 0 || info.LastError == "" {
			t.Fatalf("poison entry %s in the source: parked %v, attempts %d, last error %q: want parked with an attempt and an error", id, info.Parked, info.Attempts, info.LastError)
		}
		poisonWas[id] = info
	}

	// Stop the source relay.
	stopCtx, stopCancel := context.WithTimeout(ctx, 15*time.Second)
	stopStart := time.Now()
	err = srcRelay.Stop(stopCtx)
	stopCancel()
	t.Logf("source relay stopped in %v", time.Since(stopStart))
	if err != nil {
		t.Fatalf("stopping the source relay: %v", err)
	}
	// Scheduled entries, one key each, appended to the source once its
	// relay stopped, so they are moved while not due.
	notBefore := map[string]time.Time{}
	for i := range e2eScheduled {
		id := fmt.Sprintf("sched-%d", i)
		nb := time.Now().Add(time.Second + time.Duration(i)*2*time.Second/e2eScheduled).Truncate(time.Millisecond)
		e := outbox.Entry{ID: id, Topic: e2eTopic, Key: id, Payload: []byte("scheduled"), NotBefore: nb}
		if err := from.append(ctx, e); err != nil {
			t.Fatal(err)
		}
		notBefore[id] = nb
		h.Append(history.Entry{ID: id, Key: id, Seq: 1, At: time.Now()})
	}

	// The move: cancelled once a source partition is moved, then run
	// again to the end.
	before, err := move.Count(ctx, from.store)
	if err != nil {
		t.Fatal(err)
	}
	for id, nb := range notBefore {
		if _, err := srcLook.Lookup(ctx, id); err != nil {
			t.Errorf("scheduled entry %s (NotBefore %s, now %s) is not in the source before the move: %v", id, nb.Format(time.StampMilli), time.Now().Format(time.StampMilli), err)
		}
	}
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	first := opts
	var cancelledAt move.Progress
	first.Progress = func(p move.Progress) {
		if p.PartitionsDone >= 1 && p.PartitionsDone < p.Partitions && runCtx.Err() == nil {
			cancelledAt = p
			cancelRun()
		}
	}
	var sealedOnce sync.Once
	first.Logger = slog.New(sealHandler{on: func() {
		sealedOnce.Do(func() { now := time.Now(); sealedAt.Store(&now) })
	}})
	res1, err := move.Run(runCtx, from.store, to.store, first)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the first Run: want context.Canceled (cancelled from Progress), got %v (result %+v)", err, res1)
	}
	mid, err := move.Inspect(ctx, from.store, to.store, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !mid.Sealed || !mid.Hold.Held || mid.Source.Total() == 0 || res1.Moved == 0 {
		t.Fatalf("after the cancelled Run: sealed %v, destination held %v, source %s, moved %d: want sealed, held, entries moved and entries left",
			mid.Sealed, mid.Hold.Held, mid.Source, res1.Moved)
	}
	res2, err := move.Run(ctx, from.store, to.store, opts)
	if err != nil {
		t.Fatalf("the second Run: %v (result %+v)", err, res2)
	}
	end, err := move.Inspect(ctx, from.store, to.store, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !end.Complete() {
		t.Fatalf("after the second Run the move is not complete: %+v", end)
	}

	time.Sleep(500 * time.Millisecond) // appends to the released destination
	stopAppenders()
	for _, a := range apps {
		if a.otherErrs > 0 {
			t.Errorf("appender %d: %d appends failed with other errors than ErrSealed, last: %v", a.i, a.otherErrs, a.lastErr)
		}
	}
	straggler := apps[len(apps)-1]
	if straggler.sealed == 0 {
		t.Errorf("the straggler never had an append refused with ErrSealed (%d commits to the source, %d to the destination)", straggler.commits, straggler.commitsDest)
	}
	for _, a := range apps[:len(apps)-1] {
		if a.sealed != 0 {
			t.Errorf("appender %d switched before the seal, yet had %d appends refused with ErrSealed", a.i, a.sealed)
		}
	}

	// The destination drains all but the poison entries, parked as they
	// were in the source.
	waitFor(t, ctx, 20*time.Second, "the destination to drain", func() (bool, string) {
		c, err := move.Count(ctx, to.store)
		if err != nil {
			t.Fatal(err)
		}
		return c.Due+c.Waiting == 0, c.String()
	})
	checkParkedMoved(t, ctx, to.store, poisonWas)

	// Read the topic back and check the history.
	recs := readTopic(t, ctx, c, &h)
	for _, r := range recs {
		id := kafkasink.EntryID(r)
		if nb, ok := notBefore[id]; ok && r.Timestamp.Before(nb) {
			t.Errorf("scheduled entry %s was produced at %s, before its NotBefore %s", id, r.Timestamp.Format(time.StampMilli), nb.Format(time.StampMilli))
		}
	}
	rep := h.Check()
	keys := e2eAppenders*e2eKeys + e2eScheduled
	if len(rep.Lost) > 0 {
		t.Errorf("%d committed entries were never delivered, first: %+v", len(rep.Lost), rep.Lost[:min(5, len(rep.Lost))])
	}
	if len(rep.OrderViolations) > 0 {
		t.Errorf("%d order violations, first: %+v", len(rep.OrderViolations), rep.OrderViolations[:min(5, len(rep.OrderViolations))])
	}
	if len(rep.Unexpected) > 0 {
		t.Errorf("%d records of entries never committed (or parked), first: %+v", len(rep.Unexpected), rep.Unexpected[:min(5, len(rep.Unexpected))])
	}
	if rep.Unknown > 0 {
		t.Errorf("%d appends of unknown outcome", rep.Unknown)
	}
	var srcCommits, dstCommits, afterSeal int
	for _, a := range apps {
		srcCommits += a.commits
		dstCommits += a.commitsDest
		afterSeal += a.sourceAfterSeal
	}
	t.Logf("%s→%s: %d entries committed (%d to the source, %d to the destination, %d scheduled; %d poison parked) over %d keys; "+
		"delivered %d records, %d lost, %d order violations, %d duplicates, %d unexpected; "+
		"source before the move: %s; first Run cancelled at %d/%d partitions: moved %d, skipped %d; second Run: moved %d, skipped %d (by state: %s); "+
		"straggler: %d appends refused with ErrSealed, %d source commits returned after Seal",
		from.kind, to.kind, rep.Appended, srcCommits, dstCommits, e2eScheduled, e2ePoison, keys,
		rep.Delivered, len(rep.Lost), len(rep.OrderViolations), rep.Duplicates, len(rep.Unexpected),
		before, cancelledAt.PartitionsDone, cancelledAt.Partitions, res1.Moved, res1.Skipped, res2.Moved, res2.Skipped, res2.ByState,
		straggler.sealed, afterSeal)
	// The straggler may append to the source after it was counted, until
	// the seal.
	// An Import cut short by the cancellation may have added its batch
	// uncounted: the second run skips it.
	if got := res1.Moved + res2.Moved + res2.Skipped; got < before.Total() {
		t.Errorf("the two runs moved %d entries (%d + %d) and skipped %d, the source held %d when the move began", res1.Moved+res2.Moved, res1.Moved, res2.Moved, res2.Skipped, before.Total())
	}
}

// sealHandler calls on when the mover logs that it sealed the source.
type sealHandler struct{ on func() }

func (h sealHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h sealHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "move: source sealed" {
		h.on()
	}
	return nil
}
func (h sealHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h sealHandler) WithGroup(string) slog.Handler      { return h }

// waitFor polls cond every 50 ms until it holds, failing t after limit
// with what cond last reported.
func waitFor(t *testing.T, ctx context.Context, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("waited %v for %s; last: %s", limit, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkParkedMoved checks that the destination holds exactly the poison
// entries parked, with the attempts and last error they had in the source.
func checkParkedMoved(t *testing.T, ctx context.Context, dst outbox.Store, was map[string]outbox.EntryInfo) {
	t.Helper()
	var ids []string
	for after := ""; ; {
		page, err := dst.(outbox.Inspector).Parked(ctx, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			ids = append(ids, e.ID)
		}
		after = page[len(page)-1].ID
	}
	want := slices.Sorted(func(yield func(string) bool) {
		for id := range was {
			if !yield(id) {
				return
			}
		}
	})
	slices.Sort(ids)
	if !slices.Equal(ids, want) {
		t.Errorf("the destination's parked entries are %v, want the poison entries %v", ids, want)
	}
	for id, w := range was {
		got, err := dst.(outbox.Looker).Lookup(ctx, id)
		if err != nil {
			t.Errorf("Lookup(%s) in the destination: %v", id, err)
			continue
		}
		if !got.Parked || got.Attempts != w.Attempts || got.LastError != w.LastError {
			t.Errorf("poison entry %s in the destination: parked %v, attempts %d, last error %q; in the source: parked, attempts %d, last error %q",
				id, got.Parked, got.Attempts, got.LastError, w.Attempts, w.LastError)
		}
	}
}

// readTopic reads the whole topic from the start, records every record in
// h and returns them: until every confirmed entry of h showed up, then
// until the topic is quiet.
func readTopic(t *testing.T, ctx context.Context, c *kfake.Cluster, h *history.History) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(e2eTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := h.Check().Appended
	seen := map[string]bool{}
	var recs []*kgo.Record
	deadline := time.Now().Add(20 * time.Second)
	for empty := 0; empty < 3; {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("reading the topic: %v", err)
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			recs = append(recs, r)
			id := kafkasink.EntryID(r)
			seen[id] = true
			h.Delivered(history.Delivery{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, ID: id, Key: string(r.Key), At: r.Timestamp})
		})
		switch {
		case n > 0:
			empty = 0
		case len(seen) >= want:
			empty++
		case time.Now().After(deadline):
			t.Logf("read %d records of %d distinct entries, %d committed, before the deadline", len(recs), len(seen), want)
			return recs
		}
	}
	return recs
}
