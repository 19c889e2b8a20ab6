package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// The hot-key workload (W7): one key against many, drained through the
// Kafka sink (as Dial builds it) into kfake, with and without injected
// transient produce errors.
const (
	hotN          = 20000 // entries in a full run
	hotQuickN     = 2000  // with -quick
	hotPartitions = 8
	hotFaults     = 20 // NOT_ENOUGH_REPLICAS answers to produce requests
	// hotOld is what one key drained at before the relay put several
	// entries of a key in one publish call (issue 11: 2,000 entries of one
	// key into kfake; 15.7k/s over distinct keys).
	hotOld = 89.0
)

// hotMessages returns n messages of one key ("agg-0"), or of n distinct
// keys.
func hotMessages(n int, oneKey bool) *messages {
	m := &messages{keys: make([]string, n), keySeq: make([]int, n), payload: make([][]byte, n)}
	for i := range n {
		if oneKey {
			m.keys[i], m.keySeq[i] = "agg-0", i
		} else {
			m.keys[i], m.keySeq[i] = "agg-"+strconv.Itoa(i), 0
		}
		m.payload[i] = payload(i, m.keySeq[i])
	}
	return m
}

// hotKey: per shape (one key, many keys), each run drains a fresh backlog
// without faults and another with hotFaults transient produce errors;
// both are read back from kfake and checked (every entry, per-key order).
// The cost of the faults is the difference of the two drain times.
func (s *Suite) hotKey(ctx context.Context, t target) error {
	n := hotN
	if s.cfg.Quick {
		n = hotQuickN
	}
	for _, shape := range []struct {
		name, label string
		one         bool
	}{{"one", "one key", true}, {"many", "distinct keys", false}} {
		msgs := hotMessages(n, shape.one)
		clean, faulty, cost := s.sr(t.key+".hot."+shape.name), s.sr(t.key+".hot."+shape.name+".faults"), s.sr(t.key+".hot."+shape.name+".faultcost")
		for run := range s.thisRun() {
			var took [2]time.Duration
			ok := true
			for i, faults := range []int{0, hotFaults} {
				in, err := t.open(ctx, hotPartitions)
				if err != nil {
					return err
				}
				if _, err := in.fill(ctx, msgs, 100); err != nil {
					in.close()
					return err
				}
				c, el, err := s.drainToKfakeWith(ctx, in.store, n, faults)
				if err == nil {
					err = in.expectPending(ctx, 0)
				}
				in.close()
				if err != nil {
					s.fail("outbox/%s W7 hot key %s, %d faults, run %d: %v", t.name, shape.name, faults, run+1, err)
					ok = false
					continue
				}
				took[i] = el
				if faults == 0 {
					clean.add(rate(n, el), &c)
				} else {
					faulty.add(rate(n, el), &c)
				}
			}
			if ok {
				cost.add(float64(took[1]-took[0])/float64(time.Millisecond), nil)
			}
		}
		w := fmt.Sprintf("%s, %s entries of %s to kfake", t.title, human(n), shape.label)
		note := fmt.Sprintf("1 relay, defaults, %d partitions, sink as Dial builds it", hotPartitions)
		if shape.one {
			note += fmt.Sprintf("; before: %.0f/s (one entry of a key per publish call, issue 11)", hotOld)
		}
		system := "outbox/" + t.name + " relay → kafkasink → kfake"
		s.record("ours."+t.key+".hot."+shape.name, w, system, "entries/s", true, clean, note)
		s.record("ours."+t.key+".hot."+shape.name+".faults", w+fmt.Sprintf(", %d transient produce errors", hotFaults), system, "entries/s", true, faulty, note)
		s.record("ours."+t.key+".hot."+shape.name+".faultcost", w+fmt.Sprintf(": what %d transient produce errors add to the drain", hotFaults), system, "ms", false, cost,
			"drain time with the errors minus without, per run")
	}
	return nil
}

// drainToKfakeWith is drainToKfake with the sink's default client options
// and the first faults produce requests answered NOT_ENOUGH_REPLICAS.
func (s *Suite) drainToKfakeWith(ctx context.Context, store outbox.Store, n, faults int) (Counts, time.Duration, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, benchTopic))
	if err != nil {
		return Counts{}, 0, err
	}
	defer cluster.Close()
	sink, err := kafkasink.Dial(cluster.ListenAddrs(), kafkasink.Options{})
	if err != nil {
		return Counts{}, 0, err
	}
	defer sink.Close()
	var h *kfake.FaultHandle
	if faults > 0 {
		h = cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: benchTopic, Err: kerr.NotEnoughReplicas, Count: faults})
	}
	c, el, err := s.drainAndReadBack(ctx, cluster, sink, store, n)
	if err == nil && h != nil && h.Hits() != faults {
		err = fmt.Errorf("%d of %d injected faults were hit", h.Hits(), faults)
	}
	return c, el, err
}
