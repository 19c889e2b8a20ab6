package rabbitqueue

import (
	"context"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox/chaos/history"
)

// Tap consumes a queue for the whole of a scenario, acknowledging on
// receipt, and notes when each message arrived: the times a checked
// queue's deliveries get (see [Tap.Stamp]). When the connection fails (a
// node killed) it reconnects every 200ms until closed. A message the node
// had sent and the tap not yet received when the node died is not noted.
type Tap struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	times map[string][]time.Time // by entry ID, in arrival order
	errs  int                    // connections that failed
}

// StartTap starts consuming queue on the server at serverURL.
func StartTap(serverURL, queue string) *Tap {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Tap{cancel: cancel, done: make(chan struct{}), times: map[string][]time.Time{}}
	go func() {
		defer close(t.done)
		for ctx.Err() == nil {
			if err := t.consume(ctx, serverURL, queue); err != nil {
				t.mu.Lock()
				t.errs++
				t.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return t
}

func (t *Tap) consume(ctx context.Context, serverURL, queue string) error {
	return withChannel(ctx, serverURL, func(ch *amqp.Channel) error {
		msgs, err := ch.ConsumeWithContext(ctx, queue, "", true, true, false, false, nil)
		if err != nil {
			return err
		}
		for m := range msgs {
			now := time.Now()
			id := delivery(queue, 0, m).ID
			t.mu.Lock()
			t.times[id] = append(t.times[id], now)
			t.mu.Unlock()
		}
		return ctx.Err()
	})
}

// Close stops the tap and waits for it.
func (t *Tap) Close() {
	t.cancel()
	<-t.done
}

// Reconnects counts the tap's connections that failed (one per node
// restart, and every attempt while the node was down).
func (t *Tap) Reconnects() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.errs
}

// Stamp sets the At of each of ds (a checked queue's deliveries, in queue
// order) to the time the tap saw that copy of the message arrive: the
// k-th delivery of an ID gets the k-th arrival of it. A delivery the tap
// did not see (it arrived while the tap was reconnecting, or more copies
// landed in the checked queue than the tap saw) gets the latest of its
// ID's arrivals and the At of the delivery before it; the first such
// delivery of a queue gets its ID's first arrival or, with none, the
// earliest arrival the tap saw. It returns how many deliveries were
// stamped from a neighbour instead of their own arrival.
func (t *Tap) Stamp(ds []history.Delivery) (guessed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var earliest time.Time
	for _, ts := range t.times {
		if earliest.IsZero() || ts[0].Before(earliest) {
			earliest = ts[0]
		}
	}
	seen := map[string]int{}
	for i := range ds {
		ts := t.times[ds[i].ID]
		k := seen[ds[i].ID]
		seen[ds[i].ID]++
		if k < len(ts) {
			ds[i].At = ts[k]
			continue
		}
		guessed++
		var at time.Time
		if i > 0 {
			at = ds[i-1].At
		}
		if len(ts) > 0 {
			at = latest(at, ts[len(ts)-1])
		}
		if at.IsZero() {
			at = earliest
		}
		ds[i].At = at
	}
	return guessed
}

func latest(ts ...time.Time) time.Time {
	return slices.MaxFunc(ts, time.Time.Compare)
}
