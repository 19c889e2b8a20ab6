package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// logCapture keeps the records a relay logs.
type logCapture struct{ testenv.LogCapture }

// count returns how many records of level have a message containing msg,
// and the attributes of the first.
func (h *logCapture) count(level slog.Level, msg string) (int, map[string]string) {
	all := h.Attrs(level, func(m string) bool { return strings.Contains(m, msg) })
	if len(all) == 0 {
		return 0, map[string]string{}
	}
	return len(all), all[0]
}

var errPoison = backoff.Permanent(errors.New("rejected by the broker: poison"))

// poisonBatch appends, on one partition, perKey entries to each of keys
// keys: the first poison of each key fail for good, the rest are good. It
// returns the append positions and whether an ID is poison.
func poisonBatch(t *testing.T, b *memory.Backend, keys, perKey, poison int) (map[string]int, map[string]bool) {
	t.Helper()
	seq, bad := map[string]int{}, map[string]bool{}
	var entries []outbox.Entry
	for i := range perKey {
		for k := range keys {
			id := fmt.Sprintf("k%d-%02d", k, i)
			seq[id] = len(entries)
			bad[id] = i < poison
			entries = append(entries, outbox.Entry{ID: id, Topic: "t", Key: fmt.Sprint("k", k)})
		}
	}
	appendAll(t, b, entries...)
	return seq, bad
}

func TestRelayParksPoisonOfAKeyAndGoesOnInTheSameBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 1})
		const keys, perKey, poison = 7, 10, 8
		seq, bad := poisonBatch(t, b, keys, perKey, poison)
		sink := &recorder{fail: func(e outbox.Entry, _ int) error {
			if bad[e.ID] {
				return errPoison
			}
			return nil
		}}
		logs := &logCapture{}
		r := startRelay(t, b, sink, outbox.RelayOptions{
			BatchSize: 100, MaxInFlight: 16, PollInterval: time.Hour,
			BreakerThreshold: -1, Logger: slog.New(logs),
		})
		waitFor(t, time.Minute, "every good entry delivered", func() bool { return len(sink.snapshot()) == keys*(perKey-poison) })
		synctest.Wait()

		got := sink.snapshot()
		if err := checkKeyOrder(got, seq); err != nil {
			t.Fatal(err)
		}
		if sink.violation != "" {
			t.Fatal(sink.violation)
		}
		st := r.Stats()
		if st.Parked != keys*poison || st.Published != keys*(perKey-poison) || st.Retried != 0 {
			t.Fatalf("stats = %+v, want %d parked, %d published", st, keys*poison, keys*(perKey-poison))
		}
		if st.Batches != 1 {
			t.Errorf("took %d batches, want 1: a park must not hold its key back to the next batch", st.Batches)
		}
		parked, err := b.Parked(context.Background(), "", 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(parked) != keys*poison {
			t.Fatalf("%d entries parked in the store, want %d", len(parked), keys*poison)
		}
		for _, e := range parked {
			if !bad[e.ID] || e.Attempts != 1 || !strings.Contains(e.LastError, "poison") {
				t.Fatalf("parked %+v: want a poison entry after one attempt, with its error", e)
			}
		}
		if n, _ := logs.count(slog.LevelWarn, "entry parked"); n != 0 {
			t.Errorf("%d WARN records per parked entry; each entry's detail belongs at Debug", n)
		}
		if n, _ := logs.count(slog.LevelDebug, "entry parked"); n != keys*poison {
			t.Errorf("%d Debug records of parked entries, want %d", n, keys*poison)
		}
		n, attrs := logs.count(slog.LevelWarn, "entries parked")
		if n != 1 || attrs["parked"] != fmt.Sprint(keys*poison) || !strings.Contains(attrs["first_reason"], "poison") {
			t.Errorf("park summaries at WARN: %d, first %v; want one for the batch with its count and first reason", n, attrs)
		}
	})
}

// A retryable failure after a park still holds its key back; the key's
// entries after it wait for the retry, in order.
func TestRelayRetryAfterAParkStillHoldsTheKeyBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 1})
		seq := map[string]int{}
		for i, id := range []string{"a0", "a1", "a2", "a3"} {
			seq[id] = i
			appendAll(t, b, outbox.Entry{ID: id, Topic: "t", Key: "a"})
		}
		sink := &recorder{fail: func(e outbox.Entry, attempt int) error {
			switch {
			case e.ID == "a0":
				return errPoison
			case e.ID == "a1" && attempt == 1:
				return errors.New("transient hiccup")
			}
			return nil
		}}
		r := startRelay(t, b, sink, outbox.RelayOptions{
			BatchSize: 10, PollInterval: 50 * time.Millisecond, BreakerThreshold: -1,
			Backoff: backoff.Policy{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond},
		})
		waitFor(t, time.Minute, "a1..a3 delivered", func() bool { return len(sink.snapshot()) == 3 })
		synctest.Wait()
		if got := idsOf(sink.snapshot()); !slices.Equal(got, []string{"a1", "a2", "a3"}) {
			t.Fatalf("delivered %v, want a1 a2 a3", got)
		}
		if st := r.Stats(); st.Parked != 1 || st.Retried != 1 || st.Batches < 2 {
			t.Fatalf("stats = %+v, want 1 parked, 1 retried, the retry in a later batch", st)
		}
	})
}

// orderStore records, in one log with the sink's publishes, each park that
// the store accepted; it can fail the first MarkFailed calls that park.
type orderStore struct {
	*memory.Backend
	events    *eventLog
	failParks atomic.Int32 // fail this many MarkFailed calls that park
}

type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(ev string) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}

func (l *eventLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

func (s *orderStore) MarkFailed(ctx context.Context, l outbox.Lease, failures []outbox.Failure) error {
	parks := slices.ContainsFunc(failures, func(f outbox.Failure) bool { return f.Park })
	if parks && s.failParks.Add(-1) >= 0 {
		return errors.New("connection reset by peer")
	}
	if err := s.Backend.MarkFailed(ctx, l, failures); err != nil {
		return err
	}
	for _, f := range failures {
		if f.Park {
			s.log("park " + f.ID)
		}
	}
	return nil
}

func (s *orderStore) log(ev string) { s.events.add(ev) }

// A parked entry is recorded as parked before the next entry of its key is
// published, so a crash in between can never let a retry of the parked
// entry come after its successor. When that record fails, the batch stops
// there: the successor is not published until the park is recorded.
func TestRelayRecordsAParkBeforePublishingTheKeysNextEntry(t *testing.T) {
	for _, failParks := range []int32{0, 4} { // 4: more than the relay's tries of one write
		t.Run(fmt.Sprintf("failedParkWrites=%d", failParks), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				events := &eventLog{}
				s := &orderStore{Backend: memory.New(memory.Options{Partitions: 1}), events: events}
				s.failParks.Store(failParks)
				const keys, perKey, poison = 3, 4, 2
				seq, bad := poisonBatch(t, s.Backend, keys, perKey, poison)
				sink := &recorder{fail: func(e outbox.Entry, _ int) error {
					events.add("publish " + e.ID)
					if bad[e.ID] {
						return errPoison
					}
					return nil
				}}
				startRelay(t, s, sink, outbox.RelayOptions{
					BatchSize: 100, PollInterval: 100 * time.Millisecond, AcquireInterval: 100 * time.Millisecond,
					BreakerThreshold: -1,
				})
				waitFor(t, time.Minute, "every entry delivered or parked", func() bool {
					st, err := s.Stats(context.Background())
					return err == nil && st.Pending == 0
				})
				synctest.Wait()

				if err := checkKeyOrder(sink.snapshot(), seq); err != nil {
					t.Fatal(err)
				}
				evs := events.snapshot()
				at := func(ev string) int { return slices.Index(evs, ev) }
				for k := range keys {
					for i := 0; i+1 < perKey; i++ {
						id, next := fmt.Sprintf("k%d-%02d", k, i), fmt.Sprintf("k%d-%02d", k, i+1)
						if !bad[id] {
							continue
						}
						park, pub := at("park "+id), at("publish "+next)
						if park < 0 || pub < 0 || pub < park {
							t.Fatalf("%s parked at event %d, %s first published at event %d: the park must be recorded first\n%s",
								id, park, next, pub, strings.Join(evs, "\n"))
						}
					}
				}
				if failParks > 0 && s.failParks.Load() >= 0 {
					t.Fatalf("the park writes were not tried %d times", failParks)
				}
			})
		})
	}
}
