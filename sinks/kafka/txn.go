package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// ErrFenced means a transactional sink's producer for a partition was
// fenced: another producer with the same transactional ID (a relay that
// took the partition over) initialized after it, so the broker aborted
// this producer's transaction and none of its records become visible to
// read_committed consumers. The relay retries the entries as transient
// failures; a stale relay finds its lease lost when it records them.
var ErrFenced = errors.New("kafkasink: producer fenced by a newer holder of the partition's transactional ID")

// errAborted is the cause given to records of a transaction that was
// aborted because other records of it failed.
var errAborted = errors.New("kafkasink: transaction aborted because another record of the batch failed")

// txnClients holds one transactional client per outbox partition.
type txnClients struct {
	opts []kgo.Opt

	mu      sync.Mutex
	clients map[int]*txnClient
	closed  bool
}

type txnClient struct {
	mu sync.Mutex // one transaction at a time
	cl txnProducer
}

// txnProducer is what a transaction round uses of its *kgo.Client (a test
// stands in for kgo through it).
type txnProducer interface {
	producer
	BeginTransaction() error
	EndTransaction(ctx context.Context, commit kgo.TransactionEndTry) error
	PartitionLeader(topic string, partition int32) (leader, leaderEpoch int32, err error)
	Close()
}

func (t *txnClients) get(prefix string, partition int) (*txnClient, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("kafkasink: sink closed: %w", outbox.ErrClosed)
	}
	if tc := t.clients[partition]; tc != nil {
		return tc, nil
	}
	opts := append(t.opts[:len(t.opts):len(t.opts)], kgo.TransactionalID(prefix+strconv.Itoa(partition)))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: build the transactional client of partition %d: %w", partition, err)
	}
	tc := &txnClient{cl: cl}
	t.clients[partition] = tc
	return tc, nil
}

// drop closes a client left unusable (fenced, or a failed abort), so the
// next Publish of its partition builds a fresh one.
func (t *txnClients) drop(partition int, tc *txnClient) {
	t.mu.Lock()
	if t.clients[partition] == tc {
		delete(t.clients, partition)
	}
	t.mu.Unlock()
	go tc.cl.Close() // Close may wait for buffered records; never block Publish on it
}

func (t *txnClients) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for p, tc := range t.clients {
		tc.cl.Close()
		delete(t.clients, p)
	}
}

// publishTxn publishes msgs in one transaction per outbox partition (the
// relay passes one partition per call, so normally one transaction).
func (s *Sink) publishTxn(ctx, pctx context.Context, msgs []outbox.Entry, errs []error) {
	groups := map[int][]int{}
	for i := range msgs {
		groups[msgs[i].Partition] = append(groups[msgs[i].Partition], i)
	}
	var wg sync.WaitGroup
	for p, idx := range groups {
		wg.Go(func() { s.publishPartitionTxn(ctx, pctx, p, msgs, idx, errs) })
	}
	wg.Wait()
}

func (s *Sink) publishPartitionTxn(ctx, pctx context.Context, partition int, msgs []outbox.Entry, idx []int, errs []error) {
	tc, err := s.txn.get(s.opts.TransactionalIDPrefix, partition)
	if err != nil {
		for _, i := range idx {
			errs[i] = backoff.SemiTransient(err)
		}
		return
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()

	recs := make([]*kgo.Record, len(msgs))
	var todo []int
	for _, i := range idx {
		recs[i], errs[i] = s.record(&msgs[i])
		if errs[i] == nil {
			todo = append(todo, i)
		}
	}
	// Round 1: everything in one transaction. If it aborts because some
	// records failed permanently or for an unknown topic (those would
	// fail again at once), or as too large (which may be a neighbour's
	// fault), round 2 gives each too-large record a transaction of its
	// own and the rest another one.
	ok, fatal := s.txnRound(pctx, tc, recs, todo, errs)
	if !ok && !fatal && pctx.Err() == nil {
		var large, rest []int
		for _, i := range todo {
			switch {
			case tooLarge(errs[i]):
				large = append(large, i)
			case s.opts.Classify(errs[i]) != backoff.ClassPermanent && !topicUnknown(errs[i]):
				rest = append(rest, i)
			}
		}
		if len(large)+len(rest) < len(todo) || len(large) > 0 {
			for _, i := range large {
				if _, fatal = s.txnRound(pctx, tc, recs, []int{i}, errs); fatal {
					break
				}
			}
			if !fatal && len(rest) > 0 {
				_, fatal = s.txnRound(pctx, tc, recs, rest, errs)
			}
		}
	}
	if fatal {
		s.txn.drop(partition, tc)
	}
	for _, i := range idx {
		errs[i] = s.finish(ctx, pctx, &msgs[i], recs[i], errs[i])
	}
}

// txnRound produces the records at idx in one transaction and commits it
// if every record was acknowledged, else aborts it. It reports whether it
// committed, and whether the client is left unusable.
func (s *Sink) txnRound(ctx context.Context, tc *txnClient, recs []*kgo.Record, idx []int, errs []error) (committed, fatal bool) {
	for _, i := range idx {
		errs[i] = nil
		r := recs[i]
		recs[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	if err := tc.cl.BeginTransaction(); err != nil {
		for _, i := range idx {
			errs[i] = txnErr(err)
		}
		return false, true
	}
	sub := make([]*kgo.Record, len(recs))
	for _, i := range idx {
		sub[i] = recs[i]
	}
	produceAll(ctx, tc.cl, sub, errs)
	failed := false
	for _, i := range idx {
		if errs[i] != nil {
			failed = true
		}
	}
	if !failed {
		if err := awaitTxnPartitions(ctx, tc.cl, recs, idx); err != nil {
			// kgo would end this transaction with an abort, and say
			// nothing: the records are not published.
			for _, i := range idx {
				errs[i] = err
			}
			if aerr := tc.cl.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
				return false, true
			}
			return false, false
		}
		err := tc.cl.EndTransaction(ctx, kgo.TryCommit)
		if err == nil {
			return true, false
		}
		for _, i := range idx {
			errs[i] = txnErr(err)
		}
		// A commit that failed leaves the transaction to be aborted.
		if aerr := tc.cl.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
			return false, true
		}
		return false, isFenced(err)
	}
	for _, i := range idx {
		if errs[i] == nil {
			errs[i] = errAborted
		} else if isFenced(errs[i]) {
			errs[i] = txnErr(errs[i])
			fatal = true
		}
	}
	if err := tc.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		if isFenced(err) {
			for _, i := range idx {
				errs[i] = txnErr(err)
			}
		}
		return false, true
	}
	return false, fatal
}

// awaitTxnPartitions waits until kgo's producer state lists the
// partition of every record at idx (all acknowledged), or ctx ends.
//
// kgo's EndTransaction(TryCommit) commits only if it finds, among the
// partitions its producer state lists, one that a produce of the
// transaction reached; if it finds none while records were produced, it
// sends an abort instead and returns nil (franz-go v1.22.3, pkg/kgo/txn.go,
// EndTransaction: "no produce succeeded in this transaction but produces
// were attempted; issuing an abort", the KIP-890 path). Its list can lag
// behind the acknowledgement of the first records a client produces to a
// topic: kgo partitions the records that waited for the topic's metadata
// and only then stores the topic's partitions (storePartitionsUpdate in
// topics_and_partitions.go), and a record can be sent, acknowledged and
// answered in between when that goroutine is descheduled (the race
// detector, a loaded machine). Committing then would report records
// published whose transaction kgo aborted; the epoch bump of that abort
// also misses the partition's sequence reset, so the next transaction's
// records fail with OUT_OF_ORDER_SEQUENCE_NUMBER. Client.PartitionLeader
// reads the same list, so once it knows each record's partition, the
// commit is a commit. The wait is over as soon as that goroutine runs
// again; ctx bounds it.
func awaitTxnPartitions(ctx context.Context, cl txnProducer, recs []*kgo.Record, idx []int) error {
	var tick *time.Ticker
	for j := 0; j < len(idx); {
		r := recs[idx[j]]
		if leader, _, _ := cl.PartitionLeader(r.Topic, r.Partition); leader >= 0 {
			j++ // once listed, a partition stays listed
			continue
		}
		if tick == nil {
			tick = time.NewTicker(time.Millisecond)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// txnErr marks a transaction error: fencing is transient (the relay finds
// its lease lost, or retries with a fresh producer), everything else keeps
// the class Classify gives it.
func txnErr(err error) error {
	if isFenced(err) && !errors.Is(err, ErrFenced) {
		return backoff.Transient(fmt.Errorf("%w: %w", ErrFenced, err))
	}
	return err
}
