package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// storeDown is a memory backend whose lease renewals and fetches fail
// while down is set, as a store the relay cannot reach would fail them.
// Embedding keeps the backend's optional interfaces (Membership, Inspector,
// Prefetcher), so the relay balances and prefetches as on a real store;
// every fetch path fails.
type storeDown struct {
	*memory.Backend
	down atomic.Bool
}

var errStoreDown = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

func (s *storeDown) RenewLease(ctx context.Context, l outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if s.down.Load() {
		return outbox.Lease{}, errStoreDown
	}
	return s.Backend.RenewLease(ctx, l, ttl)
}

func (s *storeDown) FindPendingBatch(ctx context.Context, l outbox.Lease, n int) ([]outbox.Entry, error) {
	if s.down.Load() {
		return nil, errStoreDown
	}
	return s.Backend.FindPendingBatch(ctx, l, n)
}

func (s *storeDown) FetchNext(ctx context.Context, l outbox.Lease, n int, inFlight []outbox.Entry) (outbox.Batch, error) {
	if s.down.Load() {
		return outbox.Batch{}, errStoreDown
	}
	return s.Backend.FetchNext(ctx, l, n, inFlight)
}

// recordsOf returns the records of level whose message is msg, each as
// its attributes.
func (h *logCapture) recordsOf(level slog.Level, msg string) []map[string]string {
	return h.Attrs(level, func(m string) bool { return m == msg })
}

// A store outage of three minutes on three partitions, in which every
// lease renewal and every fetch fails, is logged per kind of call as one
// WARN when it starts, at most one summary WARN per 30 s while it lasts
// (with the failures and partitions since the last line), and one INFO
// when the kind works again: not one WARN per failed call and partition.
func TestRelaySummarisesStoreFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const partitions, outage, every = 3, 3 * time.Minute, 30 * time.Second
		s := &storeDown{Backend: memory.New(memory.Options{Partitions: partitions})}
		logs := &logCapture{}
		r := startRelay(t, s, &recorder{}, outbox.RelayOptions{
			PollInterval: time.Second, Logger: slog.New(logs), StatsInterval: -1,
		})
		waitFor(t, time.Minute, "every partition held", func() bool { return r.Stats().PartitionsHeld == partitions })
		s.down.Store(true)
		time.Sleep(outage)
		s.down.Store(false)
		appendAll(t, s.Backend, outbox.Entry{ID: "after", Topic: "t", Key: "k"})
		waitFor(t, time.Minute, "the entry appended after the outage relayed", func() bool {
			st, err := s.Stats(context.Background())
			return err == nil && st.Pending == 0
		})
		time.Sleep(time.Minute) // every partition renewed and fetched again
		if err := r.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}

		for _, kind := range []struct{ op, doing string }{{"renew", "renewing a lease"}, {"fetch", "fetching a batch"}} {
			started := logs.recordsOf(slog.LevelWarn, "outbox relay: "+kind.doing+" failed")
			if len(started) != 1 {
				t.Errorf("%s: %d WARNs that it started failing, want 1", kind.op, len(started))
				continue
			}
			if a := started[0]; a["op"] != kind.op || a["partition"] == "" || a["err"] != errStoreDown.Error() {
				t.Errorf("%s: the WARN that it started failing has %v; want op, partition and the error", kind.op, a)
			}
			summaries := logs.recordsOf(slog.LevelWarn, "outbox relay: "+kind.doing+" is still failing")
			if len(summaries) == 0 || len(summaries) > int(outage/every) {
				t.Errorf("%s: %d summary WARNs in a %v outage, want 1 to %d (one per %v at most)", kind.op, len(summaries), outage, int(outage/every), every)
			}
			summarised := 1 // the failure the first WARN reported
			for _, a := range summaries {
				var n, parts int
				if _, err := fmt.Sscan(a["failures"], &n); err != nil || n < 1 {
					t.Errorf("%s: a summary has failures=%q", kind.op, a["failures"])
				}
				if _, err := fmt.Sscan(a["partitions"], &parts); err != nil || parts < 2 || parts > partitions {
					t.Errorf("%s: a summary has partitions=%q, want 2 to %d (every partition fails it)", kind.op, a["partitions"], partitions)
				}
				summarised += n
			}
			ended := logs.recordsOf(slog.LevelInfo, "outbox relay: "+kind.doing+" works again")
			if len(ended) != 1 {
				t.Errorf("%s: %d INFOs that it works again, want 1", kind.op, len(ended))
				continue
			}
			var total int
			if _, err := fmt.Sscan(ended[0]["failures"], &total); err != nil || total < summarised {
				t.Errorf("%s: the INFO counts failures=%q, want at least the %d the WARNs reported", kind.op, ended[0]["failures"], summarised)
			}
			if d, err := time.ParseDuration(ended[0]["failed_for"]); err != nil || d < outage-every || d > outage+every {
				t.Errorf("%s: the INFO says failed_for=%q, want about %v", kind.op, ended[0]["failed_for"], outage)
			}
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
}

// Recording outcomes that fails after the relay's quick retries is a store
// failure like the others: one WARN naming the call in its error, and one
// INFO once a write works again.
func TestRelaySummarisesFailedOutcomeWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flakyStore{Backend: memory.New(memory.Options{})}
		s.failMarkSent.Store(4) // more than the relay's retries of one write
		appendAll(t, s.Backend, outbox.Entry{ID: "e", Topic: "t", Key: "k"})
		logs := &logCapture{}
		startRelay(t, s, &recorder{}, outbox.RelayOptions{
			PollInterval: 100 * time.Millisecond, AcquireInterval: 100 * time.Millisecond, Logger: slog.New(logs), StatsInterval: -1,
		})
		waitFor(t, time.Minute, "the entry marked sent", func() bool {
			st, err := s.Stats(context.Background())
			return err == nil && st.Pending == 0
		})
		const doing = "outbox relay: recording outcomes"
		failed := logs.recordsOf(slog.LevelWarn, doing+" failed; abandoning the lease so its entries come back")
		if len(failed) != 1 || failed[0]["op"] != "record" || failed[0]["partition"] != "0" ||
			!strings.HasPrefix(failed[0]["err"], "MarkSent: connection reset by peer") {
			t.Errorf("WARNs that recording outcomes failed: %v; want one, with op, partition and the call's error", failed)
		}
		if back := logs.recordsOf(slog.LevelInfo, doing+" works again"); len(back) != 1 || back[0]["failures"] != "1" {
			t.Errorf("INFOs that recording outcomes works again: %v; want one counting 1 failure", back)
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
}

// notifyFails is a memory backend whose first failures Notifications calls
// fail.
type notifyFails struct {
	*memory.Backend
	failures atomic.Int32
}

func (s *notifyFails) Notifications(ctx context.Context) (<-chan int, error) {
	if s.failures.Add(-1) >= 0 {
		return nil, errStoreDown
	}
	return s.Backend.Notifications(ctx)
}

// Subscribing to the store's notifications that fails is summarised too.
func TestRelaySummarisesFailedSubscriptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &notifyFails{Backend: memory.New(memory.Options{})}
		s.failures.Store(5)
		logs := &logCapture{}
		startRelay(t, s, &recorder{}, outbox.RelayOptions{PollInterval: time.Second, Logger: slog.New(logs), StatsInterval: -1})
		const doing = "outbox relay: subscribing to notifications"
		waitFor(t, time.Minute, "the subscription working", func() bool { return len(logs.recordsOf(slog.LevelInfo, doing+" works again")) > 0 })
		if failed := logs.recordsOf(slog.LevelWarn, doing+" failed; polling meanwhile"); len(failed) != 1 || failed[0]["op"] != "subscribe" {
			t.Errorf("WARNs that subscribing failed: %v; want one", failed)
		}
		if back := logs.recordsOf(slog.LevelInfo, doing+" works again"); len(back) != 1 || back[0]["failures"] != "5" {
			t.Errorf("INFOs that subscribing works again: %v; want one counting 5 failures", back)
		}
	})
}
