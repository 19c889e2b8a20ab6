package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

// inboxGroupSize is the consumer group of the group row: 4 consumers on
// inboxPartitions (8) partitions. The row also runs a group of one over
// the same records, for what the group adds.
const inboxGroupSize = 4

// inboxGroups runs one round of the group rows of t: kafkainbox
// consumers in one group (of 1, then of inboxGroupSize) over the same
// records, offsets stored with the effects, and checks that the effect
// table holds every record once, in key order.
func inboxGroups[Tx any](ctx context.Context, s *Suite, t inboxTarget[Tx]) error {
	n := s.inboxN(inboxBatch)
	recs := inboxRecords(n, 40)
	for _, size := range []int{1, inboxGroupSize} {
		key := fmt.Sprintf("inbox.%s.group%d", t.key, size)
		total, steady := s.sr(key), s.sr(key+".steady")
		for run := range s.thisRun() {
			cluster, err := inboxCluster(ctx, recs)
			if err != nil {
				return err
			}
			c, el, span, err := inboxGroupRun(ctx, t, cluster, n, size, nextOffsets(recs))
			cluster.Close()
			if err != nil {
				return fmt.Errorf("group of %d, run %d: %w", size, run+1, err)
			}
			total.add(rate(n, el), &c)
			steady.add(rate(n, span), nil)
		}
		w := fmt.Sprintf("%s inbox, %s records from kfake, consumer group of %d on %d partitions", t.title, human(n), size, inboxPartitions)
		sys := "kafkainbox (" + t.store + ") + an INSERT per record"
		s.record(key, w, sys, "records/s", true, total, "from Run to the last commit, the group's join included; kafkainbox defaults")
		s.record(key+".steady", w, sys, "records/s", true, steady, "first handled record to the last commit")
	}
	return nil
}

// nextOffsets is each partition's offset after its last record of recs,
// as produced.
func nextOffsets(recs []*kgo.Record) map[int32]int64 {
	next := map[int32]int64{}
	for _, r := range recs {
		next[r.Partition] = max(next[r.Partition], r.Offset+1)
	}
	return next
}

// inboxGroupRun consumes the n records of cluster with size kafkainbox
// consumers of one group over a fresh side, until the effect table holds
// all n, then stops them and checks the table, and that the store holds
// each partition's offset after its last record (want). It returns the
// time from the consumers' start and from the first handled record to
// then.
func inboxGroupRun[Tx any](ctx context.Context, t inboxTarget[Tx], cluster *kfake.Cluster, n, size int, want map[int32]int64) (Counts, time.Duration, time.Duration, error) {
	side, err := t.open(ctx)
	if err != nil {
		return Counts{}, 0, 0, err
	}
	defer side.close()
	ib, err := inbox.New(side.store, inbox.Options{Logger: oursLogger()})
	if err != nil {
		return Counts{}, 0, 0, err
	}
	tr := newTracker(n)
	h := func(ctx context.Context, tx Tx, m inbox.Message) error {
		rec := m.Data.(*kgo.Record)
		tr.markPayload(rec.Value)
		return side.effect(ctx, tx, rec)
	}
	consumers := make([]*kafkainbox.Consumer[Tx], size)
	for i := range consumers {
		consumers[i], err = kafkainbox.NewConsumer(ib, h, kafkainbox.Options{Group: inboxGroup, Topics: []string{inboxTopic}, Logger: oursLogger()},
			kgo.SeedBrokers(cluster.ListenAddrs()...))
		if err != nil {
			return Counts{}, 0, 0, err
		}
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	// A Run that returns before the end ends the wait.
	wctx, endWait := context.WithCancel(ctx)
	defer endWait()
	errs := make(chan error, size)
	start := time.Now()
	for _, c := range consumers {
		go func() {
			errs <- c.Run(rctx)
			endWait()
		}()
	}
	// The handlers have seen every record; the effect table holds them
	// once the last transactions commit.
	waitErr := tr.wait(wctx, inboxTimeout(n))
	if waitErr == nil {
		waitErr = waitEffects(wctx, side, n)
	}
	el := time.Since(start)
	span := el - firstAt(tr).Sub(start)
	stop()
	var runErrs []error
	for range size {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
			runErrs = append(runErrs, err)
		}
	}
	if waitErr != nil && len(runErrs) == 0 && ctx.Err() == nil && wctx.Err() != nil {
		waitErr = errors.New("a consumer's Run returned nil before every record was applied")
	}
	if err := errors.Join(append([]error{waitErr}, runErrs...)...); err != nil {
		return Counts{}, 0, 0, err
	}
	c, err := side.counts(ctx, n)
	if err != nil {
		return c, 0, 0, err
	}
	if err := c.check(false); err != nil {
		return c, 0, 0, err
	}
	got, err := side.store.Offsets(ctx, inboxGroup, inboxTopic)
	if err != nil {
		return c, 0, 0, err
	}
	if !maps.Equal(got, want) {
		return c, 0, 0, fmt.Errorf("count wrong: the store's offsets of group %s are %v, want each partition's end %v", inboxGroup, got, want)
	}
	return c, el, span, nil
}

// firstAt is when tr saw its first delivery.
func firstAt(tr *tracker) time.Time {
	var lo int64
	for i := range tr.recvAt {
		if v := tr.recvAt[i].Load(); v != 0 && (lo == 0 || v < lo) {
			lo = v
		}
	}
	return time.Unix(0, lo)
}

// waitEffects polls the effect table every 5 ms until it holds n
// records, for at most stallTimeout.
func waitEffects[Tx any](ctx context.Context, side *inboxSide[Tx], n int) error {
	deadline := time.Now().Add(stallTimeout)
	for {
		c, err := side.counts(ctx, n)
		if err != nil {
			return err
		}
		if c.Delivered >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("count wrong: %d of %d records applied %s after the handlers saw them all", c.Delivered, n, stallTimeout)
		}
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}
