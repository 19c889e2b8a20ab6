package kafkasink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/conformance/sinksuite"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// TestSinkSuite runs the public sink conformance suite against the Kafka
// sink, a kfake cluster in process per case. The faults are injected
// through kfake's control functions (produce errors, a held produce
// request) and the sink's topic mapping (a topic that does not exist).
func TestSinkSuite(t *testing.T) {
	sinksuite.Run(t, newSuiteHarness)
}

// Timeouts of the suite's sinks: short, so the LandingBound case waits
// about 4s instead of Dial's default 10s.
const (
	suitePublishTimeout = 2 * time.Second
	suiteRequestTimeout = time.Second
	suitePartitions     = 3
)

// suiteHarness is one kfake cluster with the case's topic, a sink Dial
// built for it and a consumer that keeps every record it read.
type suiteHarness struct {
	c      *kfake.Cluster
	topic  string
	target atomic.Pointer[string] // the topic the sink produces to
	sink   *kafkasink.Sink

	reader *kgo.Client
	mu     sync.Mutex
	recs   map[int32][]*kgo.Record // by partition, in offset order
	next   map[int32]int64         // next offset to read, by partition
	read   chan struct{}           // closed and replaced when recs grows

	probe atomic.Int64 // IDs of the unknown-topic fault's probes
}

func newSuiteHarness(t *testing.T, cfg sinksuite.Config) sinksuite.Harness {
	c := newCluster(t, suitePartitions, []string{cfg.Topic})
	h := &suiteHarness{c: c, topic: cfg.Topic, recs: map[int32][]*kgo.Record{}, next: map[int32]int64{}, read: make(chan struct{})}
	h.target.Store(&cfg.Topic)
	sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{
		Topic:               func(outbox.Entry) string { return *h.target.Load() },
		PublishTimeout:      suitePublishTimeout,
		UnknownTopicTimeout: time.Millisecond,
	},
		kgo.ProduceRequestTimeout(suiteRequestTimeout),
		kgo.RequestTimeoutOverhead(suiteRequestTimeout),
		// Uncompressed, so the per-record fault finds the entry ID in
		// the produce request's bytes.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	)
	if err != nil {
		t.Fatalf("kafkasink.Dial: %v", err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	h.sink = sink
	parts := map[string]map[int32]kgo.Offset{cfg.Topic: {}}
	for p := range int32(suitePartitions) {
		parts[cfg.Topic][p] = kgo.NewOffset().AtStart()
	}
	h.reader = newClient(t, c, kgo.ConsumePartitions(parts), kgo.FetchMaxWait(50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go h.consume(ctx, done)
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func (h *suiteHarness) Sink() outbox.Sink { return h.sink }

// consume keeps every record of the topic in h.recs.
func (h *suiteHarness) consume(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		fs := h.reader.PollFetches(ctx)
		var got []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
		if len(got) == 0 {
			continue
		}
		h.mu.Lock()
		for _, r := range got {
			h.recs[r.Partition] = append(h.recs[r.Partition], r)
			h.next[r.Partition] = r.Offset + 1
		}
		close(h.read)
		h.read = make(chan struct{})
		h.mu.Unlock()
	}
}

// Read waits until the consumer has read up to the end offsets the
// brokers report now, then for n messages or ctx.
func (h *suiteHarness) Read(ctx context.Context, n int) ([]sinksuite.Message, error) {
	ends, err := h.endOffsets(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return h.messages(), nil
		}
		return nil, err
	}
	for {
		h.mu.Lock()
		caughtUp := true
		for p, end := range ends {
			if h.next[p] < end {
				caughtUp = false
			}
		}
		msgs, read := h.messagesLocked(), h.read
		h.mu.Unlock()
		if caughtUp && len(msgs) >= n {
			return msgs, nil
		}
		select {
		case <-read:
		case <-time.After(20 * time.Millisecond): // the end offsets move on
			if caughtUp {
				if ends, err = h.endOffsets(ctx); err != nil && ctx.Err() == nil {
					return nil, err
				}
			}
		case <-ctx.Done():
			return msgs, nil
		}
	}
}

// endOffsets asks the brokers for the topic's end offsets.
func (h *suiteHarness) endOffsets(ctx context.Context) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = h.topic
	for p := range int32(suitePartitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, h.reader)
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	ends := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("list offsets of %s[%d]: %w", t.Topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
}

func (h *suiteHarness) messages() []sinksuite.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.messagesLocked()
}

// messagesLocked returns the records read so far, partition by
// partition, each in offset order (a key's records are in one partition).
func (h *suiteHarness) messagesLocked() []sinksuite.Message {
	var parts []int32
	for p := range h.recs {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var out []sinksuite.Message
	for _, p := range parts {
		for _, r := range h.recs[p] {
			m := sinksuite.Message{Key: string(r.Key), Payload: r.Value, Headers: map[string]string{}}
			for _, hd := range r.Headers {
				m.Headers[hd.Key] = string(hd.Value)
			}
			m.ID = m.Headers[kafkasink.DefaultIDHeader]
			out = append(out, m)
		}
	}
	return out
}

func (h *suiteHarness) Faults() []sinksuite.Fault {
	return []sinksuite.Fault{
		{Name: "ProduceErrorNotLeader", Apply: h.failProduce(nil, kerr.NotLeaderForPartition)},
		{Name: "ProduceErrorForOneRecord", PerEntry: true, Apply: func(ctx context.Context, e *outbox.Entry) (func(context.Context) error, error) {
			return h.failProduce([]byte(e.ID), kerr.NotLeaderForPartition)(ctx, e)
		}},
		{Name: "RecordTooLarge", PerEntry: true, Permanent: true, Mentions: []string{"max.message.bytes", "ProducerBatchMaxBytes"}, Apply: tooLarge},
		{Name: "UnknownTopic", Permanent: true, Mentions: []string{"UnknownTopicTimeout", "create the topic"}, Apply: h.unknownTopic},
		{Name: "ProduceHeld", Stalls: true, Apply: h.holdProduce},
	}
}

// failProduce answers every produce request (whose bytes hold match,
// when match is not nil) with code for each of its partitions, until
// healed.
func (h *suiteHarness) failProduce(match []byte, code *kerr.Error) func(context.Context, *outbox.Entry) (func(context.Context) error, error) {
	return func(context.Context, *outbox.Entry) (func(context.Context) error, error) {
		var on atomic.Bool
		on.Store(true)
		h.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			if !on.Load() {
				h.c.DropControl()
				return nil, nil, false
			}
			h.c.KeepControl()
			req := kr.(*kmsg.ProduceRequest)
			if match != nil && !produceHolds(req, match) {
				return nil, nil, false
			}
			resp := req.ResponseKind().(*kmsg.ProduceResponse)
			for _, rt := range req.Topics {
				st := kmsg.NewProduceResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewProduceResponseTopicPartition()
					sp.Partition = rp.Partition
					sp.ErrorCode = code.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
		return func(context.Context) error { on.Store(false); return nil }, nil
	}
}

func produceHolds(req *kmsg.ProduceRequest, match []byte) bool {
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if bytes.Contains(rp.Records, match) {
				return true
			}
		}
	}
	return false
}

// tooLarge makes the entry's payload larger than a produce batch may be
// (kgo's ProducerBatchMaxBytes, about 1 MB, and the broker's
// max.message.bytes).
func tooLarge(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
	e.Payload = bytes.Repeat([]byte{'x'}, 2<<20)
	return func(context.Context) error { return nil }, nil
}

// unknownTopic maps the case's topic to one that does not exist, and
// publishes a probe to it so that the topic has been unknown for
// longer than the sink's UnknownTopicTimeout (1ms) when the case
// publishes: its entries park at once.
func (h *suiteHarness) unknownTopic(ctx context.Context, _ *outbox.Entry) (func(context.Context) error, error) {
	missing := h.topic + "-missing"
	h.target.Store(&missing)
	probe := outbox.Entry{ID: fmt.Sprintf("probe-%d", h.probe.Add(1)), Topic: h.topic, Payload: []byte("probe")}
	if errs := h.sink.Publish(ctx, []outbox.Entry{probe}); errs[0] == nil {
		return nil, errors.New("the probe of a missing topic was published")
	}
	time.Sleep(2 * time.Millisecond) // past UnknownTopicTimeout
	return func(context.Context) error { h.target.Store(&h.topic); return nil }, nil
}

// holdProduce holds every produce request, unanswered, until healed; then
// kfake handles the held requests as usual (they were in flight).
func (h *suiteHarness) holdProduce(context.Context, *outbox.Entry) (func(context.Context) error, error) {
	let := make(chan struct{})
	var on atomic.Bool
	on.Store(true)
	h.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !on.Load() {
			h.c.DropControl()
			return nil, nil, false
		}
		h.c.KeepControl()
		h.c.SleepControl(func() { <-let })
		return nil, nil, false
	})
	var once sync.Once
	return func(context.Context) error {
		once.Do(func() { on.Store(false); close(let) })
		return nil
	}, nil
}
