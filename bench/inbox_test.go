package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/inbox"
)

// memInboxTarget is the in-memory inbox store with an in-memory effect
// table that a transaction's rows reach when it commits: the harness's
// consumers and checks, without a database.
func memInboxTarget() inboxTarget[*inbox.MemoryTx] {
	return inboxTarget[*inbox.MemoryTx]{name: "memory", key: "mem", title: "Memory", store: "inbox.Memory", plain: "MemoryTx",
		open: func(context.Context) (*inboxSide[*inbox.MemoryTx], error) {
			m := inbox.NewMemory()
			var (
				mu   sync.Mutex
				rows []effectRow
			)
			effect := func(_ context.Context, tx *inbox.MemoryTx, rec *kgo.Record) error {
				seq, keySeq, err := parsePayload(rec.Value)
				if err != nil {
					return err
				}
				tx.OnCommit(func() {
					mu.Lock()
					rows = append(rows, effectRow{seq: seq, key: string(rec.Key), keySeq: keySeq})
					mu.Unlock()
				})
				return nil
			}
			return &inboxSide[*inbox.MemoryTx]{
				store:  m,
				effect: effect,
				plain:  txPlain(m.InTx, effect),
				counts: func(_ context.Context, n int) (Counts, error) {
					mu.Lock()
					defer mu.Unlock()
					return effectCounts(rows, n), nil
				},
				close: func() {},
			}, nil
		}}
}

// Both consumers, per record and in batches, apply every record of the
// topic once, in key order; the inbox consumer then skips the records
// handed to it again.
func TestInboxRunsApplyEveryRecordOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 1000
	cluster, err := inboxCluster(ctx, inboxRecords(n, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	for _, batch := range []int{1, inboxBatch} {
		for _, kind := range []consumerKind{plainConsumer, inboxConsumer, idConsumer} {
			c, el, err := inboxRun(ctx, memInboxTarget(), cluster, n, batch, kind, newPhases())
			if err != nil {
				t.Fatalf("batch %d, consumer %d: %v", batch, kind, err)
			}
			if c.Delivered != n || c.Duplicates != 0 || el <= 0 {
				t.Errorf("batch %d, consumer %d: %+v in %s", batch, kind, c, el)
			}
		}
	}
}

// The check can fail: the plain consumer handed the records twice leaves
// duplicates, which the counts report; the inbox consumer told to expect
// Applied for records it applied before fails.
func TestInboxChecksCatchDuplicates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 300
	cluster, err := inboxCluster(ctx, inboxRecords(n, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	target := memInboxTarget()
	side, err := target.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := consumeN(ctx, cluster, n, 10, plainHandler(side, newPhases())); err != nil {
			t.Fatal(err)
		}
	}
	c, err := side.counts(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.check(false); err == nil || c.Duplicates != n {
		t.Errorf("the plain consumer run twice: %+v, check %v; want %d duplicates reported", c, err, n)
	}

	side, err = target.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(side.store, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := consumeN(ctx, cluster, n, 10, inboxHandler(side, ib, false, inbox.Applied)); err != nil {
		t.Fatal(err)
	}
	_, err = consumeN(ctx, cluster, 10, 10, inboxHandler(side, ib, false, inbox.Applied))
	if err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("redelivered records expected to be applied: %v, want an error naming the duplicate", err)
	}
	if c, _ := side.counts(ctx, n); c.Delivered != n || c.Duplicates != 0 {
		t.Errorf("after the redelivery: %+v, want every record once", c)
	}
}
