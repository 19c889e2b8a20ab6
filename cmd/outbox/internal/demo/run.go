package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// demo runs the demo on the resolved configuration c. Everything it
// started is stopped, and the demo's schema or keys removed, before it
// returns, whatever the outcome.
func demo(ctx context.Context, c *DemoCmd, out io.Writer) (err error) {
	start := time.Now()
	plan := planDemo(c)
	w := newWorld(plan)
	// The run ends early on the first error (an append, or a relay's
	// store error the demo cannot get past) or with ctx.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(context.Canceled)
	logs := &relayLog{fatal: cancelRun}
	logger := slog.New(logs)

	broker, err := startBroker(runCtx, c)
	if err != nil {
		return err
	}
	defer broker.close()

	db, err := openDemoBackend(runCtx, c, logger)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.close(); cerr != nil {
			err = errors.Join(err, cerr)
		} else if db.what != "" {
			fmt.Fprintf(out, "removed    %s\n", db.what)
		}
	}()

	fmt.Fprintf(out, "outbox demo: %s, %d partitions, 2 relays, %s; seed %d\n", db.name, c.Partitions, broker.name, c.Seed)
	fmt.Fprintf(out, "plan: %s\n", plan.describe(c))
	var dash *demoDashboard
	if c.UI {
		if dash, err = startDemoDashboard(ctx, c, db); err != nil {
			return err
		}
		defer dash.stop()
		fmt.Fprintf(out, "dashboard  %s (actions answer 403 until the run ends)\n", dash.url)
	}

	r := &demoRun{c: c, out: out, plan: plan, w: w, db: db, logs: logs, runCtx: runCtx, cancelRun: cancelRun,
		fleet: &relayFleet{store: db.store, sink: &faultySink{next: broker.sink, fault: broker.fault, w: w}, opts: relayOptions(c, logger), relays: map[string]*outbox.Relay{}}}
	// Stop in this order: appenders, relays, consumer; the deferred
	// close above then removes the schema or keys.
	defer r.stop(ctx)
	handover, err := r.run(broker)
	if err != nil {
		return err
	}
	if err := r.fleet.stopInOrder(runCtx); err != nil {
		return err
	}
	cancelRun(context.Canceled) // the consumer has seen what it will see
	r.consuming.Wait()
	reportCtx, cancelReport := context.WithTimeout(ctx, demoStopTimeout)
	defer cancelReport()
	err = w.report(reportCtx, out, db, broker.short, r.fleet.stats(), handover, time.Since(start))
	if dash != nil {
		c.finished = true
		dash.running.Store(false)
		fmt.Fprintf(out, "dashboard  %s still serves the demo's outbox, now with requeue and cancel; Ctrl-C (SIGINT) or SIGTERM ends the demo\n", dash.url)
		<-c.uiStop
	}
	return err
}

// relayOptions are the options of the demo's relays, by owner.
func relayOptions(c *DemoCmd, logger *slog.Logger) func(owner string) outbox.RelayOptions {
	return func(owner string) outbox.RelayOptions {
		return outbox.RelayOptions{
			Owner: owner, BatchSize: c.Batch, PollInterval: demoPoll,
			LeaseTTL: 3 * time.Second, AcquireInterval: 100 * time.Millisecond,
			Backoff:         backoff.Policy{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond, MaxAttempts: demoMaxAttempts},
			BreakerCooldown: 500 * time.Millisecond, StatsInterval: -1, Logger: logger,
		}
	}
}

// demoRun is one run of the demo while it appends, relays and consumes.
type demoRun struct {
	c     *DemoCmd
	out   io.Writer
	plan  *demoPlan
	w     *world
	db    *demoBackend
	logs  *relayLog
	fleet *relayFleet

	runCtx    context.Context
	cancelRun context.CancelCauseFunc

	appending, consuming sync.WaitGroup
}

// run starts the consumer, relays A and B and the appenders, and waits
// until every committed entry arrived or was parked, handing relay A's
// partitions over to relay C halfway. It returns what the handover did.
func (r *demoRun) run(broker *demoBroker) (handover string, err error) {
	r.consuming.Go(func() {
		if err := broker.consume(r.runCtx, r.w.arrive); err != nil && r.runCtx.Err() == nil {
			r.cancelRun(fmt.Errorf("demo: consuming from %s: %w", broker.short, err))
		}
	})
	for _, name := range []string{"relay-A", "relay-B"} {
		if err := r.fleet.start(r.runCtx, name); err != nil {
			return "", err
		}
	}
	for g := range 4 {
		r.appending.Go(func() {
			if err := r.w.appendLoop(r.runCtx, r.db.appendTx, g); err != nil {
				r.cancelRun(fmt.Errorf("demo: appending a transaction: %w", err))
			}
		})
	}
	var progress <-chan time.Time
	if r.c.Progress > 0 {
		tick := time.NewTicker(r.c.Progress)
		defer tick.Stop()
		progress = tick.C
	}
	check := time.NewTicker(20 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-r.runCtx.Done():
			return "", r.w.abort(r.runCtx, r.c, r.out, r.db, r.logs, r.fleet.parked())
		case <-progress:
			fmt.Fprintf(r.out, "  %s\n", r.w.progress(r.fleet.parked()))
		case <-check.C:
		}
		// Halfway, relay A stops and relay C takes its partitions over.
		if handover == "" && r.w.arrived.Load() > int64(r.plan.arrivals()/2) {
			if handover, err = r.handOver(); err != nil {
				return "", err
			}
			if handover == "" {
				continue // the run ended: the select above reports why
			}
		}
		if r.w.appendedAll() && r.w.arrived.Load()+r.fleet.parked() >= int64(r.plan.committed) {
			return handover, nil
		}
	}
}

// handOver stops relay A and starts relay C, which takes A's partitions
// over. It returns "" and no error when the run ended meanwhile (the
// run's loop reports why).
func (r *demoRun) handOver() (string, error) {
	a := r.fleet.relays["relay-A"]
	held := a.Stats().PartitionsHeld
	stopCtx, cancel := context.WithTimeout(r.runCtx, demoStopTimeout)
	err := a.Stop(stopCtx)
	cancel()
	if err != nil {
		if r.runCtx.Err() != nil {
			return "", nil
		}
		return "", fmt.Errorf("demo: stopping relay-A: %w", err)
	}
	if err := r.fleet.start(r.runCtx, "relay-C"); err != nil {
		return "", err
	}
	handover := fmt.Sprintf("relay-A stopped after %d arrivals holding %d partitions; relay-C took them over",
		r.w.arrived.Load(), held)
	fmt.Fprintf(r.out, "  %s\n", handover)
	return handover, nil
}

// stop ends the run whatever its state: the appenders, then the relays,
// then the consumer.
func (r *demoRun) stop(ctx context.Context) {
	r.cancelRun(context.Canceled)
	r.appending.Wait()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoStopTimeout)
	defer cancel()
	var stopping sync.WaitGroup
	for _, rl := range r.fleet.relays {
		stopping.Go(func() { _ = rl.Stop(stopCtx) })
	}
	stopping.Wait()
	r.consuming.Wait()
}

// relayFleet is the demo's relays, by name, in the order they started.
type relayFleet struct {
	store  outbox.Store
	sink   outbox.Sink
	opts   func(owner string) outbox.RelayOptions
	relays map[string]*outbox.Relay
	order  []string
}

// start starts a relay named name.
func (f *relayFleet) start(ctx context.Context, name string) error {
	r, err := outbox.NewRelay(f.store, f.sink, f.opts(name))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := r.Start(ctx); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	f.relays[name] = r
	f.order = append(f.order, name)
	return nil
}

// parked is the entries the relays parked.
func (f *relayFleet) parked() (n int64) {
	for _, r := range f.relays {
		n += r.Stats().Parked
	}
	return n
}

// stopInOrder stops the relays in the order they started.
func (f *relayFleet) stopInOrder(ctx context.Context) error {
	stopCtx, cancel := context.WithTimeout(ctx, demoStopTimeout)
	defer cancel()
	for _, name := range f.order {
		if err := f.relays[name].Stop(stopCtx); err != nil {
			return fmt.Errorf("demo: stopping %s: %w", name, err)
		}
	}
	return nil
}

// stats adds up the relays' counts.
func (f *relayFleet) stats() outbox.RelayStats {
	var stats outbox.RelayStats
	for _, r := range f.relays {
		s := r.Stats()
		stats.Published += s.Published
		stats.Retried += s.Retried
		stats.Parked += s.Parked
	}
	return stats
}
