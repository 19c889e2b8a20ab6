package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// decodingStore is the memory backend seen through a decoder that fails on
// some entries, as a store with an encoded format would: FetchBatch parks
// the entries in corrupt (with their reason) as the Postgres and Redis
// backends park what they cannot decode, and reports them. Entries in
// topicless come back without their topic, as from a store whose topic was
// blanked by hand but that does not check it.
type decodingStore struct {
	*memory.Backend
	corrupt   map[string]string // ID -> reason
	topicless map[string]bool

	mu       sync.Mutex
	reported []string // IDs FetchBatch reported, in order
}

func (s *decodingStore) FetchBatch(ctx context.Context, l outbox.Lease, limit int) (outbox.Batch, error) {
	batch, err := s.Backend.FindPendingBatch(ctx, l, limit)
	if err != nil {
		return outbox.Batch{}, err
	}
	var out outbox.Batch
	var parks []outbox.Failure
	for _, e := range batch {
		if reason, ok := s.corrupt[e.ID]; ok {
			parks = append(parks, outbox.Failure{ID: e.ID, Park: true, Error: reason})
			out.Parked = append(out.Parked, outbox.CorruptEntry{ID: e.ID, Topic: e.Topic, Key: e.Key, Reason: reason})
			continue
		}
		if s.topicless[e.ID] {
			e.Topic = ""
		}
		out.Entries = append(out.Entries, e)
	}
	if err := s.Backend.MarkFailed(ctx, l, parks); err != nil {
		return outbox.Batch{}, err
	}
	s.mu.Lock()
	for _, c := range out.Parked {
		s.reported = append(s.reported, c.ID)
	}
	s.mu.Unlock()
	return out, nil
}

func (s *decodingStore) FindPendingBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.Entry, error) {
	b, err := s.FetchBatch(ctx, l, limit)
	return b.Entries, err
}

// FetchNext is FetchBatch, as the memory backend's FetchNext is
// FindPendingBatch (claimed entries are never returned again).
func (s *decodingStore) FetchNext(ctx context.Context, l outbox.Lease, limit int, _ []outbox.Entry) (outbox.Batch, error) {
	return s.FetchBatch(ctx, l, limit)
}

// A park the store makes while fetching (an entry it cannot decode) is
// logged once with what could be read of the entry, and counted in the
// relay's stats and metrics like a park of the relay's own; an entry
// without a topic is parked by the relay before anything of its key goes
// on. The rest of the partition, the same key included, is delivered in
// order.
func TestRelayLogsAndCountsParksOfUndecodableEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		b := memory.New(memory.Options{Partitions: 1})
		// Key a: a0, a1 (corrupt), a2, a3 (no topic), a4; key b: b0, b1
		// (corrupt); c0 unkeyed.
		seq := map[string]int{}
		for i, e := range []outbox.Entry{
			{ID: "a0", Key: "a"}, {ID: "b0", Key: "b"}, {ID: "a1", Key: "a"}, {ID: "a2", Key: "a"},
			{ID: "c0"}, {ID: "b1", Key: "b"}, {ID: "a3", Key: "a"}, {ID: "a4", Key: "a"},
		} {
			e.Topic = "t"
			seq[e.ID] = i
			appendAll(t, b, e)
		}
		s := &decodingStore{
			Backend: b,
			corrupt: map[string]string{
				"a1": "test store: corrupt headers field: a length runs past the end",
				"b1": "test store: unknown format version 9",
			},
			topicless: map[string]bool{"a3": true},
		}
		logs := &logCapture{}
		sink := &recorder{}
		r := startRelay(t, s, sink, outbox.RelayOptions{
			BatchSize: 100, PollInterval: time.Second, MeterProvider: mp, Logger: slog.New(logs),
		})
		waitFor(t, time.Minute, "the good entries delivered", func() bool { return len(sink.snapshot()) == 5 })
		time.Sleep(3 * time.Second) // more fetches: nothing is reported twice
		synctest.Wait()

		got := sink.snapshot()
		if ids := slices.Sorted(slices.Values(idsOf(got))); !slices.Equal(ids, []string{"a0", "a2", "a4", "b0", "c0"}) {
			t.Fatalf("delivered %v, want a0 a2 a4 b0 c0", idsOf(got))
		}
		if err := checkKeyOrder(got, seq); err != nil {
			t.Fatal(err)
		}
		if st := r.Stats(); st.Parked != 3 || st.Published != 5 {
			t.Fatalf("stats = %+v, want 3 parked (2 by the store, 1 by the relay), 5 published", st)
		}
		ms := collect(t, reader)
		if got := counterSum(ms[outbox.MetricEntries], "outcome", "parked"); got != 3 {
			t.Errorf("%s{outcome=parked} = %d, want 3", outbox.MetricEntries, got)
		}
		s.mu.Lock()
		reported := slices.Clone(s.reported)
		s.mu.Unlock()
		slices.Sort(reported)
		if !slices.Equal(reported, []string{"a1", "b1"}) {
			t.Fatalf("the store reported %v", reported)
		}

		// One WARN per store park, naming the entry and the reason.
		n, _ := logs.count(slog.LevelWarn, "the store parked an entry")
		if n != 2 {
			t.Errorf("%d WARN records of store parks, want 2 (one each)", n)
		}
		seen := map[string]map[string]string{}
		for _, attrs := range logs.Attrs(slog.LevelWarn, func(m string) bool { return strings.Contains(m, "the store parked an entry") }) {
			seen[attrs["id"]] = attrs
		}
		for id, reason := range s.corrupt {
			a := seen[id]
			if a == nil || a["reason"] != reason || a["topic"] != "t" || a["key"] != id[:1] {
				t.Errorf("log of %s's park: %v; want its reason, topic and key", id, a)
			}
		}

		parked, err := b.Parked(context.Background(), "", 10)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"a1": s.corrupt["a1"], "b1": s.corrupt["b1"], "a3": "has no topic"}
		if len(parked) != len(want) {
			t.Fatalf("parked %v, want %v", idsOf(parked), want)
		}
		for _, e := range parked {
			if !strings.Contains(e.LastError, want[e.ID]) || e.Attempts != 1 {
				t.Errorf("parked %s: attempts %d, last error %q; want one attempt and %q", e.ID, e.Attempts, e.LastError, want[e.ID])
			}
		}
	})
}

// A batch made only of parks (every entry undecodable) is followed at once
// by the next fetch rather than by a poll wait.
func TestRelayFetchesAgainAfterABatchOfOnlyStoreParks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 1})
		corrupt := map[string]string{}
		for i := range 10 {
			id := fmt.Sprint("bad", i)
			corrupt[id] = "test store: corrupt"
			appendAll(t, b, outbox.Entry{ID: id, Topic: "t", Key: "k"})
		}
		appendAll(t, b, outbox.Entry{ID: "good", Topic: "t", Key: "k"})
		s := &decodingStore{Backend: b, corrupt: corrupt}
		sink := &recorder{}
		start := time.Now()
		startRelay(t, s, sink, outbox.RelayOptions{BatchSize: 10, PollInterval: time.Hour})
		waitFor(t, time.Minute, "the good entry delivered", func() bool { return len(sink.snapshot()) == 1 })
		// The bubble's clock moves only while everything waits (waitFor
		// polls every 10 ms of it): without a wait between the fetches the
		// good entry is out within waitFor's first steps, far below the
		// idle wait (at least a second with these options).
		if took := time.Since(start); took >= time.Second {
			t.Fatalf("the good entry waited %v: a fetch that only parked was followed by a wait", took)
		}
	})
}
