package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/move"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// The move workload (W8): move.Run carries a backlog of N entries from a
// Postgres outbox to a Redis one while production traffic runs on the
// same servers: a second Postgres outbox, fed by an appender at
// moveLiveRate entries/s, drained by a relay into kfake. The figure is
// the move's entries/s (Run, from the seal to the release), against the
// raw limit of the destination measured in the same round: redisoutbox
// Append of batches of the mover's batch size, moveWorkers callers, into
// a fresh prefix, as fast as possible (the move's Import does that work
// plus the source's export and delete).
const (
	movePartitions = 8
	moveWorkers    = move.DefaultWorkers
	moveBatch      = move.DefaultBatch
	moveLiveRate   = 1000 // entries/s of the live outbox's appender
	moveLivePerTx  = 10
	moveLiveMax    = 120 * moveLiveRate // the most the live appender appends in a round
)

func init() {
	comparisons = append(comparisons, comparison{
		group:  "Move W8, Postgres → Redis, 100k backlog, live Postgres outbox draining meanwhile, vs raw Redis append",
		ours:   "ours.move.pg2redis",
		other:  "raw.move.redis.append",
		target: 0.5,
	})
}

// moveWorkload runs W8 once per round.
func (s *Suite) moveWorkload(ctx context.Context) error {
	n := s.cfg.N
	msgs := newMessages(n, 8)
	live := newMessages(moveLiveMax, 9)
	mv, raw := s.sr("move.pg2redis"), s.sr("move.redis.append")
	for run := range s.thisRun() {
		r, c, err := s.moveRound(ctx, msgs, live)
		if errors.Is(err, errNotMovable) {
			s.logf("   W8 move skipped: %v", err)
			return nil
		}
		if err != nil {
			s.fail("W8 move run %d: %v", run+1, err)
			continue
		}
		mv.add(r.move, &c)
		raw.add(r.raw, nil)
	}
	w := fmt.Sprintf("Move W8, Postgres → Redis, %s backlog, live traffic", human(n))
	s.record("ours.move.pg2redis", w, "move.Run", "entries/s", true, mv,
		fmt.Sprintf("%d → %d partitions, Workers %d, Batch %d; meanwhile a Postgres outbox appended %d/s (%d per tx) and its relay drained it into kfake",
			movePartitions, movePartitions, moveWorkers, moveBatch, moveLiveRate, moveLivePerTx))
	s.record("raw.move.redis.append", w, "raw: redisoutbox Append", "entries/s", true, raw,
		fmt.Sprintf("%d entries with IDs per call, %d callers, a fresh prefix of %d partitions, no other traffic", moveBatch, moveWorkers, movePartitions))
	return nil
}

// errNotMovable skips W8 while the Redis backend cannot be moved to.
var errNotMovable = errors.New("the Redis backend does not implement outbox.Importer (the move interfaces) in this tree")

type moveRates struct{ move, raw float64 }

// moveRound fills the source, measures the raw append rate, starts the
// live traffic, moves, and checks every count.
func (s *Suite) moveRound(ctx context.Context, msgs, live *messages) (moveRates, Counts, error) {
	var rates moveRates
	n := len(msgs.keys)
	pg, rd := s.postgresTarget(), s.redisTarget()

	// The raw limit: Append into a fresh Redis outbox.
	rawIn, err := rd.open(ctx, movePartitions)
	if err != nil {
		return rates, Counts{}, err
	}
	rawAppend := rawIn.store.(interface {
		Append(context.Context, ...outbox.Entry) error
	})
	el, err := parallel(ctx, moveWorkers, n, moveBatch, func(ctx context.Context, lo, hi int) error {
		es := msgs.entries(lo, hi)
		for i := range es {
			es[i].ID = fmt.Sprintf("%08x-0000-7000-8000-%012x", lo, i) // the length of a UUID, as the moved entries have
		}
		return rawAppend.Append(ctx, es...)
	})
	if err == nil {
		err = rawIn.expectPending(ctx, n)
	}
	rawIn.close()
	if err != nil {
		return rates, Counts{}, fmt.Errorf("raw Redis append: %w", err)
	}
	rates.raw = rate(n, el)

	// The source, filled; the destination, empty.
	src, err := pg.open(ctx, movePartitions)
	if err != nil {
		return rates, Counts{}, err
	}
	defer src.close()
	if _, err := src.fill(ctx, msgs, 100); err != nil {
		return rates, Counts{}, fmt.Errorf("filling the source: %w", err)
	}
	dst, err := rd.open(ctx, movePartitions)
	if err != nil {
		return rates, Counts{}, err
	}
	defer dst.close()
	if _, ok := dst.store.(outbox.Importer); !ok {
		return rates, Counts{}, errNotMovable
	}

	// The live traffic: appender and relay, until the move is over.
	liveIn, err := pg.open(ctx, movePartitions)
	if err != nil {
		return rates, Counts{}, err
	}
	defer liveIn.close()
	stopLive, liveDone, err := s.liveTraffic(ctx, liveIn, live)
	if err != nil {
		return rates, Counts{}, err
	}
	defer stopLive()
	if !sleepCtx(ctx, time.Second) { // the relay and the appender at speed
		return rates, Counts{}, ctx.Err()
	}

	opts := move.Options{SourceName: "bench source", Workers: moveWorkers, Batch: moveBatch, Logger: oursLogger()}
	if _, err := move.Prepare(ctx, src.store, dst.store, opts); err != nil {
		return rates, Counts{}, err
	}
	start := time.Now()
	res, err := move.Run(ctx, src.store, dst.store, opts)
	el = time.Since(start)
	liveN, liveErr := liveDone()
	if err != nil {
		return rates, Counts{}, fmt.Errorf("move.Run: %w", err)
	}
	if liveErr != nil {
		return rates, Counts{}, fmt.Errorf("the live traffic: %w", liveErr)
	}
	rates.move = rate(n, el)
	s.logf("   move: %d entries in %s (%s entries/s; raw Redis append %s entries/s, %.2f×); live outbox: %d entries appended and delivered meanwhile",
		res.Moved, el.Round(time.Millisecond), fmtNum(rates.move), fmtNum(rates.raw), rates.move/rates.raw, liveN)

	// Counted: the source is empty and sealed, the destination released
	// and holding n entries, each delivered exactly once, in key order.
	if res.Moved != int64(n) || res.Skipped != 0 {
		return rates, Counts{}, fmt.Errorf("count wrong: move.Run moved %d and skipped %d, want %d moved", res.Moved, res.Skipped, n)
	}
	st, err := move.Inspect(ctx, src.store, dst.store, opts)
	if err != nil {
		return rates, Counts{}, err
	}
	if !st.Complete() || st.Destination.Total() != int64(n) {
		return rates, Counts{}, fmt.Errorf("count wrong: after the move the source holds %s (sealed %v), the destination %s (held %v), want %d", st.Source, st.Sealed, st.Destination, st.Hold.Held, n)
	}
	tr := newTracker(n)
	if _, err := s.drainRelay(ctx, dst.store, countSink{tr}, tr, 1, nil); err != nil {
		return rates, tr.counts_(), fmt.Errorf("draining the destination: %w", err)
	}
	c := tr.counts_()
	if err := c.check(false); err != nil {
		return rates, c, fmt.Errorf("the destination: %w", err)
	}
	return rates, c, dst.expectPending(ctx, 0)
}

// liveTraffic appends live's messages to in at moveLiveRate, in order
// (one appender, so each key's append order is its message order), and
// runs a relay that drains in into kfake. stop ends it at once (for
// errors); done stops the appender, waits until the relay delivered
// everything appended, checks the counts and returns how many entries
// were appended.
func (s *Suite) liveTraffic(ctx context.Context, in *instance, live *messages) (stop func(), done func() (int, error), err error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, benchTopic))
	if err != nil {
		return nil, nil, err
	}
	sink, err := kafkasink.Dial(cluster.ListenAddrs(), kafkasink.Options{}, kgo.ProducerLinger(0))
	if err != nil {
		cluster.Close()
		return nil, nil, err
	}
	tr := newTracker(len(live.keys))
	relay, err := outbox.NewRelay(in.store, ackSink{inner: sink, tr: tr}, relayOptions(nil))
	if err != nil {
		sink.Close()
		cluster.Close()
		return nil, nil, err
	}
	if err := relay.Start(ctx); err != nil {
		sink.Close()
		cluster.Close()
		return nil, nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	var appended atomic.Int64
	var appendErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second * moveLivePerTx / moveLiveRate)
		defer tick.Stop()
		for lo := 0; lo < len(live.keys); lo += moveLivePerTx {
			select {
			case <-actx.Done():
				return
			case <-tick.C:
			}
			hi := min(lo+moveLivePerTx, len(live.keys))
			// Under ctx, not actx: a transaction cut by the stop could
			// commit without its append returning, and then be
			// delivered without being counted as appended.
			if err := in.append(ctx, live.entries(lo, hi)); err != nil {
				appendErr = err
				return
			}
			appended.Store(int64(hi))
		}
	})
	var once sync.Once
	shut := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			stopCtx, c := context.WithTimeout(context.Background(), 30*time.Second)
			defer c()
			if err := relay.Stop(stopCtx); err != nil {
				s.logf("live relay stop: %v", err)
			}
			sink.Close()
			cluster.Close()
		})
	}
	done = func() (int, error) {
		cancel()
		wg.Wait()
		k := int(appended.Load())
		err := appendErr
		if err == nil {
			err = tr.waitN(ctx, k, drainTimeout(k))
		}
		c := tr.counts_()
		shut()
		if err != nil {
			return k, err
		}
		c.Expected = k
		if c.Delivered != k {
			return k, fmt.Errorf("count wrong: %d delivered of %d appended", c.Delivered, k)
		}
		return k, c.check(false)
	}
	return shut, done, nil
}
