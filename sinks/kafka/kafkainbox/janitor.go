package kafkainbox

import (
	"context"
	"slices"
	"sync"

	"github.com/outboxrelay/outbox/inbox"
)

// janitor runs the inbox's janitor (Options.Retention) while the Consumer
// holds partition 0 of its first topic and Run runs. kgo's assignment
// callbacks and Run report to it; sync starts or stops the janitor to
// match.
type janitor struct {
	run func(ctx context.Context) // one janitor, until ctx ends

	syncMu sync.Mutex // serializes sync: a stop waits for the janitor before another start

	mu      sync.Mutex // guards the fields below
	holds   bool       // partition 0 of the first topic is assigned
	runCtx  context.Context
	cancel  context.CancelFunc // of the running janitor; nil when none runs
	done    chan struct{}      // closed when the running janitor returned
	started int                // janitors started, for tests
}

// holding records whether partition 0 of topic is assigned, from a
// callback's partitions: assigned (true) or revoked or lost (false).
func (j *janitor) holding(topic string, parts map[string][]int32, assigned bool) {
	if j == nil || !slices.Contains(parts[topic], 0) {
		return
	}
	j.mu.Lock()
	j.holds = assigned
	j.mu.Unlock()
	j.sync()
}

// running records Run's context (nil once Run returns).
func (j *janitor) running(ctx context.Context) {
	if j == nil {
		return
	}
	j.mu.Lock()
	j.runCtx = ctx
	j.mu.Unlock()
	j.sync()
}

// sync starts the janitor when the partition is held and Run runs, and
// stops it (waiting for it to return) when either ends.
func (j *janitor) sync() {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	want := j.holds && j.runCtx != nil
	switch {
	case want && j.cancel == nil:
		ctx, cancel := context.WithCancel(j.runCtx)
		done := make(chan struct{})
		j.cancel, j.done = cancel, done
		j.started++
		go func() {
			defer close(done)
			j.run(ctx)
		}()
		j.mu.Unlock()
	case !want && j.cancel != nil:
		cancel, done := j.cancel, j.done
		j.cancel, j.done = nil, nil
		j.mu.Unlock()
		cancel()
		<-done
	default:
		j.mu.Unlock()
	}
}

// newJanitor returns the janitor of opts, or nil when opts.Retention is 0.
func newJanitor[Tx any](ib *inbox.Inbox[Tx], opts Options) *janitor {
	if opts.Retention == 0 {
		return nil
	}
	return &janitor{run: func(ctx context.Context) {
		err := ib.RunJanitor(ctx, inbox.JanitorOptions{Retention: opts.Retention, Interval: opts.JanitorInterval, Logger: opts.Logger})
		if err != nil {
			opts.Logger.Error("kafkainbox: the inbox janitor did not start", "group", opts.Group, "err", err)
		}
	}}
}
