package kafkainbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/inbox"
)

// revokeCommitTimeout bounds the commit of marked offsets to Kafka when
// partitions are revoked (only for lag monitoring: a failure is logged).
const revokeCommitTimeout = 10 * time.Second

// Consumer reads a consumer group's partitions with franz-go and hands
// their records to an inbox, storing each partition's next offset in the
// same transaction as the handler's effects and the inbox records, and
// resuming every assigned partition from the offsets in the inbox store
// (never from the group's commits in Kafka). See the package
// documentation for the guarantee, rebalances and failures.
//
// Make one with [NewConsumer]; Run it once. Stats is safe for concurrent
// use.
type Consumer[Tx any] struct {
	ib   *inbox.Inbox[Tx]
	h    inbox.Handler[Tx]
	opts Options
	cl   *kgo.Client

	started atomic.Bool
	// hurry is set when a rebalance waits for the poll being handled:
	// partitions stop before their next batch and are rewound.
	hurry atomic.Bool

	mu      sync.Mutex // guards failing
	failing map[partition]*failure

	jan *janitor // nil without Options.Retention

	applied, duplicates, gaps, batches, failures, yielded atomic.Int64
}

type partition struct {
	topic string
	part  int32
}

// failure is the retry state of a partition whose batch failed.
type failure struct {
	attempts int
	offset   int64     // the first record of the failed batch
	due      time.Time // when fetching resumes; zero once resumed
}

// Stats are a Consumer's counts since it was made.
type Stats struct {
	// Applied counts messages whose handler ran and committed.
	Applied int64
	// Duplicates counts messages skipped because a committed transaction
	// applied their ID before (published twice, or read again).
	Duplicates int64
	// Gaps counts applied messages whose sequence number skipped numbers
	// of their key.
	Gaps int64
	// Batches counts committed transactions.
	Batches int64
	// Failures counts failed attempts of batches (each logged).
	Failures int64
	// Yielded counts the times a partition stopped before its next batch
	// because a rebalance was waiting for the poll (it is rewound and
	// its records fetched again by whoever owns it next).
	Yielded int64
}

// NewConsumer returns a Consumer of opts.Topics for opts.Group that applies
// each record through ib with h, in batches of at most opts.MaxBatch
// records of one partition per transaction. The handler gets the record
// as m.Data.(*kgo.Record).
//
// kopts configure the kgo client the Consumer makes and owns (at least
// kgo.SeedBrokers; also TLS, SASL, FetchMaxWait, session timeouts...).
// The balancer defaults to kgo.CooperativeStickyBalancer and the
// isolation level to read_committed, so that the records of an aborted
// transaction (the Kafka sink's transactional mode) are never applied
// (kgo.Balancers and kgo.FetchIsolationLevel in kopts override them). The Consumer sets, over anything in kopts:
// ConsumerGroup, ConsumeTopics, ConsumeResetOffset (Options.ResetOffset),
// BlockRebalanceOnPoll, AdjustFetchOffsetsFn, OnPartitionsAssigned, OnPartitionsRevoked,
// OnPartitionsLost, OnPartitionsCallbackBlocked, and AutoCommitMarks (or
// DisableAutoCommit with Options.DisableKafkaCommit).
//
// An error wraps [inbox.ErrInvalidArgument] for bad options, or is kgo's.
func NewConsumer[Tx any](ib *inbox.Inbox[Tx], h inbox.Handler[Tx], opts Options, kopts ...kgo.Opt) (*Consumer[Tx], error) {
	if ib == nil || h == nil {
		return nil, fmt.Errorf("kafkainbox: NewConsumer needs an inbox and a handler: %w", inbox.ErrInvalidArgument)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	c := &Consumer[Tx]{ib: ib, h: h, opts: opts, failing: map[partition]*failure{}, jan: newJanitor(ib, opts)}
	all := make([]kgo.Opt, 0, len(kopts)+12)
	all = append(all, kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	all = append(all, kopts...)
	all = append(all,
		kgo.ConsumerGroup(opts.Group),
		kgo.ConsumeTopics(opts.Topics...),
		kgo.ConsumeResetOffset(opts.ResetOffset),
		kgo.BlockRebalanceOnPoll(),
		kgo.AdjustFetchOffsetsFn(c.adjust),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { c.hurry.Store(true) }),
	)
	if opts.DisableKafkaCommit {
		all = append(all, kgo.DisableAutoCommit())
	} else {
		all = append(all, kgo.AutoCommitMarks())
	}
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("kafkainbox: making the Kafka client: %w", err)
	}
	c.cl = cl
	return c, nil
}

// Client returns the Consumer's kgo client, for its metrics and admin
// requests. Do not poll it, change its offsets or close it: Run does.
func (c *Consumer[Tx]) Client() *kgo.Client { return c.cl }

// Stats returns the Consumer's counts so far.
func (c *Consumer[Tx]) Stats() Stats {
	return Stats{
		Applied:    c.applied.Load(),
		Duplicates: c.duplicates.Load(),
		Gaps:       c.gaps.Load(),
		Batches:    c.batches.Load(),
		Failures:   c.failures.Load(),
		Yielded:    c.yielded.Load(),
	}
}

// Run joins the group and handles records until ctx is done, then lets
// the batches in flight finish (no new one starts), for up to
// Options.StopTimeout after which their context is canceled and they roll
// back, closes the client (leaving the group, which hands the partitions
// to the other members) and returns nil. The handler's context is not
// ctx: it is canceled only at the StopTimeout. A failed batch is tried again
// after a backoff, forever unless Options.MaxAttempts is set: then Run
// returns a [*BatchError] once a batch failed that many times. Run also
// returns an error if the client was closed under it. Run may be called
// once.
func (c *Consumer[Tx]) Run(ctx context.Context) error {
	if c == nil || c.cl == nil {
		return errNoConsumer
	}
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("kafkainbox: Run was called before; a Consumer runs once, make a new one")
	}
	defer c.cl.Close()
	c.jan.running(ctx)
	defer c.jan.running(nil)
	// Batches run in bctx: when ctx is done they are let finish for up to
	// StopTimeout, so that a stop does not cut a commit short.
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopAfter := context.AfterFunc(ctx, func() { time.AfterFunc(c.opts.StopTimeout, cancel) })
	defer stopAfter()
	for {
		c.resumeDue(time.Now())
		c.hurry.Store(false)
		fs := c.poll(ctx)
		if ctx.Err() != nil {
			c.cl.AllowRebalance()
			return nil
		}
		err := c.fetchErrors(fs)
		if err == nil {
			err = c.handle(ctx, bctx, fs)
		}
		c.cl.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// poll polls, until the earliest retry of a failed partition is due.
func (c *Consumer[Tx]) poll(ctx context.Context) kgo.Fetches {
	if due := c.nextDue(); !due.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, due)
		defer cancel()
	}
	return c.cl.PollFetches(ctx)
}

// fetchErrors logs the fetch errors of a poll (kgo retries them itself)
// and returns an error only when the client was closed.
func (c *Consumer[Tx]) fetchErrors(fs kgo.Fetches) error {
	for _, fe := range fs.Errors() {
		switch {
		case errors.Is(fe.Err, kgo.ErrClientClosed):
			return errors.New("kafkainbox: the Kafka client was closed while Run was polling; do not close Client(), cancel Run's context instead")
		case errors.Is(fe.Err, context.DeadlineExceeded), errors.Is(fe.Err, context.Canceled):
			// The poll's own deadline: a retry is due.
		default:
			c.opts.Logger.Warn("kafkainbox: Kafka fetch error (the client retries)",
				"group", c.opts.Group, "topic", fe.Topic, "partition", fe.Partition, "err", fe.Err)
		}
	}
	return nil
}

// work is one partition's records of a poll.
type work struct {
	partition
	recs []*kgo.Record
}

// outcome is what handling one partition's records came to.
type outcome struct {
	// rewind is the offset of the first record not handled, -1 when all
	// were.
	rewind int64
	// err is why they were not (nil when stopped for a rebalance).
	err error
}

// handle handles a poll's records: each partition's in order, in batches
// (run in bctx), the partitions concurrently, no new batch once ctx is
// done; then rewinds and pauses the partitions that did not finish.
func (c *Consumer[Tx]) handle(ctx, bctx context.Context, fs kgo.Fetches) error {
	works, dropped := c.split(fs)
	outs := make([]outcome, len(works))
	var wg sync.WaitGroup
	for i, w := range works {
		wg.Go(func() { outs[i] = c.handlePartition(ctx, bctx, w) })
	}
	wg.Wait()
	return c.settle(ctx, works, outs, dropped)
}

// split groups a poll's records by partition, in order, leaving out the
// partitions paused for a retry (returned as dropped, to be rewound).
func (c *Consumer[Tx]) split(fs kgo.Fetches) (works []work, dropped map[partition]int64) {
	idx := map[partition]int{}
	c.mu.Lock()
	defer c.mu.Unlock()
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		k := partition{p.Topic, p.Partition}
		if f, ok := c.failing[k]; ok && !f.due.IsZero() {
			if dropped == nil {
				dropped = map[partition]int64{}
			}
			dropped[k] = f.offset
			return
		}
		if i, ok := idx[k]; ok {
			works[i].recs = append(works[i].recs, p.Records...)
			return
		}
		idx[k] = len(works)
		works = append(works, work{partition: k, recs: slices.Clip(p.Records)}) // an append copies
	})
	return works, dropped
}

// handlePartition handles one partition's records of a poll in batches of
// at most MaxBatch, each in one transaction, stopping at the first
// failure, when a rebalance waits or when ctx (Run's) is done. The
// batches run in bctx.
func (c *Consumer[Tx]) handlePartition(ctx, bctx context.Context, w work) outcome {
	recs := w.recs
	for len(recs) > 0 {
		if ctx.Err() != nil {
			return outcome{rewind: recs[0].Offset}
		}
		if c.hurry.Load() {
			c.yielded.Add(1)
			return outcome{rewind: recs[0].Offset}
		}
		msgs, convErr := c.messages(recs[:min(len(recs), c.opts.MaxBatch)])
		if len(msgs) > 0 {
			results, err := c.ib.HandleBatch(bctx, msgs, c.h)
			if err != nil {
				return outcome{rewind: recs[0].Offset, err: err}
			}
			c.count(results)
			if !c.opts.DisableKafkaCommit {
				c.cl.MarkCommitRecords(recs[len(msgs)-1])
			}
			recs = recs[len(msgs):]
		}
		if convErr != nil {
			return outcome{rewind: recs[0].Offset, err: convErr}
		}
	}
	return outcome{rewind: -1}
}

// messages maps recs to inbox messages with their offsets, up to the first
// record that does not map (whose error is returned).
func (c *Consumer[Tx]) messages(recs []*kgo.Record) ([]inbox.Message, error) {
	msgs := make([]inbox.Message, 0, len(recs))
	for _, r := range recs {
		m, err := Message(r)
		if err != nil {
			return msgs, err
		}
		m.Offset = &inbox.Offset{Group: c.opts.Group, Topic: r.Topic, Partition: r.Partition, Next: r.Offset + 1}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func (c *Consumer[Tx]) count(results []inbox.Result) {
	c.batches.Add(1)
	for _, r := range results {
		switch r.Outcome {
		case inbox.Applied:
			c.applied.Add(1)
		case inbox.Duplicate:
			c.duplicates.Add(1)
		}
		if r.Gap != nil {
			c.gaps.Add(1)
		}
	}
}

// settle rewinds every partition that did not finish to its first record
// not handled, and pauses a failed one until its retry is due. It returns
// a *BatchError once a batch failed MaxAttempts times. It runs on the
// polling goroutine before AllowRebalance, as kgo asks of SetOffsets.
func (c *Consumer[Tx]) settle(ctx context.Context, works []work, outs []outcome, dropped map[partition]int64) error {
	rewind := map[string]map[int32]kgo.EpochOffset{}
	at := func(k partition, offset int64) {
		if rewind[k.topic] == nil {
			rewind[k.topic] = map[int32]kgo.EpochOffset{}
		}
		rewind[k.topic][k.part] = kgo.EpochOffset{Epoch: -1, Offset: offset}
	}
	for k, offset := range dropped {
		at(k, offset)
	}
	pause := map[string][]int32{}
	var fatal error
	now := time.Now()
	c.mu.Lock()
	for i, o := range outs {
		k := works[i].partition
		if o.rewind < 0 {
			delete(c.failing, k)
			continue
		}
		at(k, o.rewind)
		if o.err == nil || ctx.Err() != nil {
			continue // stopped for a rebalance or for Run's end: not a failure
		}
		f := c.failing[k]
		if f == nil || f.offset != o.rewind {
			f = &failure{offset: o.rewind}
			c.failing[k] = f
		}
		f.attempts++
		c.failures.Add(1)
		if c.opts.MaxAttempts > 0 && f.attempts >= c.opts.MaxAttempts {
			if fatal == nil {
				fatal = &BatchError{Topic: k.topic, Partition: k.part, Offset: o.rewind, Attempts: f.attempts, Err: o.err}
			}
			continue
		}
		wait := c.opts.backoff(f.attempts)
		f.due = now.Add(wait)
		pause[k.topic] = append(pause[k.topic], k.part)
		c.opts.Logger.Warn("kafkainbox: a batch failed and is not applied; trying it again after the backoff",
			"group", c.opts.Group, "topic", k.topic, "partition", k.part, "offset", o.rewind,
			"attempt", f.attempts, "retry_in", wait, "err", o.err)
	}
	c.mu.Unlock()
	if len(pause) > 0 {
		c.cl.PauseFetchPartitions(pause)
	}
	if len(rewind) > 0 {
		c.cl.SetOffsets(rewind)
	}
	return fatal
}

// resumeDue resumes fetching the failed partitions whose retry is due.
func (c *Consumer[Tx]) resumeDue(now time.Time) {
	resume := map[string][]int32{}
	c.mu.Lock()
	for k, f := range c.failing {
		if !f.due.IsZero() && !now.Before(f.due) {
			f.due = time.Time{}
			resume[k.topic] = append(resume[k.topic], k.part)
		}
	}
	c.mu.Unlock()
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(resume)
	}
}

// nextDue is the earliest retry due, zero when none is waiting.
func (c *Consumer[Tx]) nextDue() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, f := range c.failing {
		if !f.due.IsZero() && (next.IsZero() || f.due.Before(next)) {
			next = f.due
		}
	}
	return next
}

// adjust is kgo's AdjustFetchOffsetsFn: it runs when partitions are
// assigned, after kgo fetched the group's commits and before it fetches
// any record of them, and replaces every offset with the inbox store's
// (or the reset offset for a partition never stored).
func (c *Consumer[Tx]) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	store := c.ib.Store()
	for topic, parts := range offsets {
		stored, err := store.Offsets(ctx, c.opts.Group, topic)
		if err != nil {
			c.opts.Logger.Warn("kafkainbox: reading the stored offsets failed; kgo joins the group again",
				"group", c.opts.Group, "topic", topic, "err", err)
			return nil, fmt.Errorf("kafkainbox: reading the inbox store's offsets of group %q, topic %q: %w", c.opts.Group, topic, err)
		}
		for p := range parts {
			if next, ok := stored[p]; ok {
				parts[p] = kgo.NewOffset().At(next)
			} else {
				parts[p] = c.opts.ResetOffset
			}
		}
	}
	return offsets, nil
}

// assigned is kgo's OnPartitionsAssigned: it starts the janitor
// (Options.Retention) when partition 0 of the first topic is among
// assigned and Run runs.
func (c *Consumer[Tx]) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c.jan.holding(c.opts.Topics[0], assigned, true)
}

// revoked is kgo's OnPartitionsRevoked. With BlockRebalanceOnPoll it runs
// between polls, when no batch is in flight.
func (c *Consumer[Tx]) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	c.forget(cl, revoked)
	if c.opts.DisableKafkaCommit {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, revokeCommitTimeout)
	defer cancel()
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		c.opts.Logger.Info("kafkainbox: committing the handled offsets to Kafka at a revocation failed (they serve lag monitoring only; the inbox store has them)",
			"group", c.opts.Group, "err", err)
	}
}

// lost is kgo's OnPartitionsLost.
func (c *Consumer[Tx]) lost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	c.forget(cl, lost)
}

// forget stops the janitor when partition 0 of the first topic is among
// parts (waiting for it to return, so that it never runs beside the next
// holder's), drops the retry state of partitions no longer assigned and
// resumes them, so that they are fetched if assigned again. It uses the
// callback's client: kgo may call back before NewConsumer set c.cl.
func (c *Consumer[Tx]) forget(cl *kgo.Client, parts map[string][]int32) {
	c.jan.holding(c.opts.Topics[0], parts, false)
	c.mu.Lock()
	for topic, ps := range parts {
		for _, p := range ps {
			delete(c.failing, partition{topic, p})
		}
	}
	c.mu.Unlock()
	if len(parts) > 0 {
		cl.ResumeFetchPartitions(parts)
	}
}
