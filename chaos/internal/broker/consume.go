package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox/chaos/history"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// Consume reads every partition of topic from offset 0 up to its end as of
// the call and returns one Delivery per record, by partition and then
// offset. It reads committed records only (read_committed): records of
// aborted transactions are skipped, and the end is the last stable offset
// (the high watermark when no transaction is open). A record without the
// outbox ID header has ID "". At is the record's timestamp, which the
// producer sets when it produces. It uses a client of its own, no consumer
// group, and faults do not touch it (they apply to Produce only).
func (b *Broker) Consume(ctx context.Context, topic string) ([]history.Delivery, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.brokers, ",")...))
	if err != nil {
		return nil, fmt.Errorf("broker: consume %s: %w", topic, err)
	}
	defer cl.Close()
	ends, err := endOffsets(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	start := map[int32]kgo.Offset{}
	next := map[int32]int64{} // next offset to see, per partition still to read
	for p, end := range ends {
		if end > 0 {
			start[p] = kgo.NewOffset().At(0)
			next[p] = 0
		}
	}
	if len(start) == 0 {
		return nil, nil
	}
	cons, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(b.brokers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) take offsets; seeing
		// them tells us a partition was read to its end.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return nil, fmt.Errorf("broker: consume %s: %w", topic, err)
	}
	defer cons.Close()
	var out []history.Delivery
	for len(next) > 0 {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("broker: consume %s: partitions not read to their end (%v, next offsets %v): %w", topic, ends, next, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = fmt.Errorf("broker: consume %s partition %d: %w", t, p, err)
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			n, reading := next[r.Partition]
			if !reading || r.Offset < n {
				return // past the end as of the call, or seen
			}
			next[r.Partition] = r.Offset + 1
			if r.Offset+1 >= ends[r.Partition] {
				delete(next, r.Partition)
			}
			if r.Offset >= ends[r.Partition] || r.Attrs.IsControl() {
				return
			}
			out = append(out, history.Delivery{
				Topic:     r.Topic,
				Partition: r.Partition,
				Offset:    r.Offset,
				ID:        kafkasink.EntryID(r),
				Key:       string(r.Key),
				At:        r.Timestamp,
			})
		})
	}
	slices.SortFunc(out, func(a, b history.Delivery) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return out, nil
}

// endOffsets returns each partition's last stable offset.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mreq.AllowAutoTopicCreation = false
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("broker: metadata of %s: %w", topic, err)
	}
	if len(mresp.Topics) != 1 {
		return nil, fmt.Errorf("broker: metadata of %s: %d topics answered", topic, len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("broker: metadata of %s: %w", topic, err)
	}
	lreq := kmsg.NewPtrListOffsetsRequest()
	lreq.IsolationLevel = 1 // read_committed: the last stable offset
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for _, p := range mresp.Topics[0].Partitions {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = p.Partition, -1 // -1: the end
		lt.Partitions = append(lt.Partitions, lp)
	}
	lreq.Topics = append(lreq.Topics, lt)
	lresp, err := lreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("broker: end offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	for _, t := range lresp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("broker: end offset of %s partition %d: %w", topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	if len(ends) != len(mresp.Topics[0].Partitions) {
		return nil, fmt.Errorf("broker: end offsets of %s: %d of %d partitions answered", topic, len(ends), len(mresp.Topics[0].Partitions))
	}
	return ends, nil
}
