package relaycmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/outboxrelay/outbox"
)

// relayServer serves the relay's /metrics, /healthz and /readyz, and
// every other path with dashboard when it is not nil (--ui-addr equal to
// --metrics-addr); the three keep needing no token.
func relayServer(metrics http.Handler, ready *relayReadiness, dashboard http.Handler) *http.Server {
	mux := http.NewServeMux()
	if dashboard != nil {
		mux.Handle("/", dashboard)
	}
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rep := ready.report(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !rep.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	})
	return cli.HTTPServer(mux)
}

// ReadyReport is the body of /readyz.
type ReadyReport struct {
	// Ready: the relay runs, the store and the broker answered, and
	// publishing has not failed whole for failAfter (see Publish).
	Ready bool `json:"ready"`
	// State is "starting", "active" (it holds partitions), "standby" (it
	// holds none: the other relays hold them all, or it waits for a
	// lease), or "stopping" (draining after a signal).
	State string `json:"state"`
	// Store and Sink are the last reachability checks of the store and
	// of the broker (Kafka, NATS or RabbitMQ, named by SinkName).
	Store ReadyProbe `json:"store"`
	Sink  ReadyProbe `json:"sink"`
	// SinkName is the broker: "Kafka", "NATS" or "RabbitMQ".
	SinkName string `json:"sink_name"`
	// Kafka is Sink again, under the name /readyz had before the relay
	// published to other brokers; only with the Kafka sink.
	Kafka *ReadyProbe `json:"kafka,omitempty"`
	// Publish is not OK while every publish has failed (no record
	// acknowledged) for failAfter or longer, as the sink reports it (its
	// Failing method); OK again once a record is acknowledged.
	Publish ReadyProbe `json:"publish"`
	// PartitionsHeld, PartitionsTarget and Members are the relay's
	// outbox.RelayStats; Partitions is the outbox's partition count.
	PartitionsHeld   int64 `json:"partitions_held"`
	PartitionsTarget int64 `json:"partitions_target"`
	Partitions       int   `json:"partitions"`
	Members          int64 `json:"members"`
	// CheckedAt is when Store and Sink were checked (RFC 3339).
	CheckedAt time.Time `json:"checked_at"`
}

// ReadyProbe is one reachability check.
type ReadyProbe struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// relayReadiness checks the store and the broker for /readyz: at most once per
// ttl (however often it is asked), each check bounded by timeout; a
// monitor also checks in the background, logging each change (an outage
// is logged once when it begins and once when it ends).
type relayReadiness struct {
	log          *slog.Logger
	ttl, timeout time.Duration
	store, sink  func(context.Context) error
	// sinkName names the broker ("Kafka"); kafkaCompat also reports its
	// check as "kafka", for the Kafka sink.
	sinkName    string
	kafkaCompat bool
	// failing is the sink's Failing (nil: publishing is not judged);
	// failAfter is how long every publish may fail before the relay is
	// not ready, twice the publish timeout flag timeoutFlag.
	failing     func() (time.Time, error)
	failAfter   time.Duration
	timeoutFlag string
	// scrub removes secrets from an error's text before it is shown.
	scrub func(string) string

	check1 sync.Mutex // one check at a time

	mu         sync.Mutex
	relay      *outbox.Relay
	partitions int
	stopping   bool
	last       ReadyReport
	at         time.Time // of last's checks; zero before the first
	publishBad bool      // the last check found publishing failing, for its log
}

func (r *relayReadiness) setRelay(relay *outbox.Relay, partitions int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.relay, r.partitions = relay, partitions
}

func (r *relayReadiness) setStopping() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
}

// report returns the current readiness, checking the store and the broker when
// the last check is older than ttl.
func (r *relayReadiness) report(ctx context.Context) ReadyReport {
	r.mu.Lock()
	fresh := !r.at.IsZero() && time.Since(r.at) < r.ttl
	starting := r.relay == nil && !r.stopping
	r.mu.Unlock()
	if !fresh && !starting { // while starting, the start's own check stands
		r.check(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.last
	rep.Partitions = r.partitions
	switch {
	case r.stopping:
		rep.State = "stopping"
	case r.relay == nil:
		rep.State = "starting"
	default:
		st := r.relay.Stats()
		rep.PartitionsHeld, rep.PartitionsTarget, rep.Members = st.PartitionsHeld, st.PartitionsTarget, st.Members
		rep.State = "standby"
		if st.PartitionsHeld > 0 {
			rep.State = "active"
		}
	}
	rep.Publish = r.publishProbe()
	rep.SinkName = r.sinkName
	if r.kafkaCompat {
		k := rep.Sink
		rep.Kafka = &k
	}
	rep.Ready = rep.Store.OK && rep.Sink.OK && rep.Publish.OK && (rep.State == "active" || rep.State == "standby")
	return rep
}

// publishProbe judges publishing: not OK once every publish has failed
// for failAfter or longer.
func (r *relayReadiness) publishProbe() ReadyProbe {
	if r.failing == nil {
		return ReadyProbe{OK: true}
	}
	since, last := r.failing()
	if since.IsZero() {
		return ReadyProbe{OK: true}
	}
	d := time.Since(since)
	if d < r.failAfter {
		return ReadyProbe{OK: true}
	}
	msg := fmt.Sprintf("every publish has failed for %v (no record acknowledged; not ready after %v, twice %s, until one is)", d.Round(time.Second), r.failAfter, r.timeoutFlag)
	if last != nil {
		msg += "; last error: " + last.Error()
	}
	return ReadyProbe{Error: r.scrub(msg)}
}

// check checks the store and the broker, concurrently, each within timeout, and
// logs what changed since the last check.
func (r *relayReadiness) check(ctx context.Context) {
	r.check1.Lock()
	defer r.check1.Unlock()
	r.mu.Lock()
	if !r.at.IsZero() && time.Since(r.at) < r.ttl/2 { // another caller just checked
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	probe := func(f func(context.Context) error, what string) ReadyProbe {
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		defer cancel()
		if err := f(cctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return ReadyProbe{Error: what + " did not answer within " + r.timeout.String()}
			}
			return ReadyProbe{Error: r.scrub(err.Error())}
		}
		return ReadyProbe{OK: true}
	}
	var store, sink ReadyProbe
	var wg sync.WaitGroup
	wg.Go(func() { store = probe(r.store, "the store") })
	wg.Go(func() { sink = probe(r.sink, r.sinkName) })
	wg.Wait()
	if ctx.Err() != nil {
		return // the asker went away: not a finding
	}

	r.mu.Lock()
	prev, first := r.last, r.at.IsZero()
	r.last.Store, r.last.Sink, r.at = store, sink, time.Now()
	r.last.CheckedAt = r.at.UTC().Truncate(time.Millisecond)
	r.mu.Unlock()
	r.logChange("the store", first, prev.Store, store)
	r.logChange(r.sinkName, first, prev.Sink, sink)
	r.logPublish()
}

// logPublish logs a change of publishProbe since the last check: WARN once
// when every publish has failed for failAfter, INFO once when a record is
// acknowledged again.
func (r *relayReadiness) logPublish() {
	p := r.publishProbe()
	r.mu.Lock()
	was := r.publishBad
	r.publishBad = !p.OK
	r.mu.Unlock()
	switch {
	case !p.OK && !was:
		r.log.Warn("outbox relay: every publish has failed for a while; /readyz reports not ready until a record is acknowledged (the relay keeps retrying)", "err", p.Error)
	case p.OK && was:
		r.log.Info("outbox relay: publishing works again: a record was acknowledged")
	}
}

func (r *relayReadiness) logChange(what string, first bool, prev, now ReadyProbe) {
	switch {
	case !now.OK && (first || prev.OK):
		r.log.Warn("outbox relay: "+what+" is not reachable; /readyz reports not ready until it is (the relay keeps retrying)", "err", now.Error)
	case now.OK && !first && !prev.OK:
		r.log.Info("outbox relay: " + what + " is reachable again")
	}
}

// monitor checks every interval until ctx ends.
func (r *relayReadiness) monitor(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.check(ctx)
		}
	}
}

// relayStoreProbe returns a cheap reachability check of the opened store:
// a ping of its pool or client.
func relayStoreProbe(o *cli.Opened) func(context.Context) error {
	switch {
	case o.Pool != nil:
		return o.Pool.Ping
	case o.SQL != nil:
		return o.SQL.PingContext
	case o.Redis != nil:
		return func(ctx context.Context) error { return o.Redis.Ping(ctx).Err() }
	}
	return func(context.Context) error { return nil }
}
