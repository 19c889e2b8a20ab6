package outbox

import (
	"context"
	"testing"
	"time"
)

// advisingStore is a Store of one partition that advises a poll interval;
// NewRelay calls none of its other methods.
type advisingStore struct {
	Store
	every time.Duration
}

func (advisingStore) Partitions() int               { return 1 }
func (s advisingStore) PollInterval() time.Duration { return s.every }

// NewRelay takes a PollAdvisor's interval when RelayOptions.PollInterval
// is zero, keeps an explicit one, and ignores advice that is not positive.
func TestNewRelayTakesTheStoresPollAdvice(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		advice, given time.Duration
		want          time.Duration
	}{
		{"Advice", 50 * time.Millisecond, 0, 50 * time.Millisecond},
		{"ExplicitWins", 50 * time.Millisecond, 3 * time.Second, 3 * time.Second},
		{"ZeroAdviceIgnored", 0, 0, DefaultPollInterval},
		{"NegativeAdviceIgnored", -time.Second, 0, DefaultPollInterval},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, err := NewRelay(advisingStore{every: c.advice}, SinkFunc(func(context.Context, Entry) error { return nil }), RelayOptions{PollInterval: c.given})
			if err != nil {
				t.Fatal(err)
			}
			if r.opts.PollInterval != c.want {
				t.Errorf("PollInterval = %v, want %v", r.opts.PollInterval, c.want)
			}
		})
	}
}
