package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox"
)

// The broker workloads (issue 29): our relay and the NATS JetStream and
// RabbitMQ sinks against each broker's raw client publishing the same
// records with the same guarantees, in the same round.
//
//   - drain: the N backlog of our Postgres and Redis backends through one
//     relay and the sink, against the raw client publishing the same N
//     records (NATS: async JetStream publishes with Nats-Msg-Id, every ack
//     awaited; RabbitMQ: persistent, mandatory publishes with publisher
//     confirms into a durable queue). Both sides are read back from the
//     broker and checked.
//   - sink alone: our sink with no store and no relay, Publish calls of
//     the relay's size one after the other: between the raw client and
//     the drains, the sink's share of a gap.
//   - hot key: one key against 1,000 keys, through our sink (Postgres).
//   - latency: the sustainable end-to-end rate with the broker in the
//     path and a consumer reading from it, then commit-to-arrival at half
//     of it (Postgres, wake-ups).
//
// Each run publishes into a destination of its own (a stream, an exchange
// with its queue), deleted afterwards.

// brokerTarget is a broker as the broker workloads see it.
type brokerTarget struct {
	name   string // in workload names and -only: "nats", "rabbitmq"
	key    string // result key part: "nats", "amqp"
	title  string // "NATS JetStream", "RabbitMQ"
	server string // the broker's process name, for the CPU log
	raw    string // what the raw client does, for the System column
	sink   string // our sink, for the System column
	// open makes a fresh, empty destination.
	open func(ctx context.Context) (destination, error)
	// close closes the target's own connections.
	close func()
}

// destination is one fresh place to publish into: a stream with its
// subject, or an exchange with its queue. close deletes it.
type destination interface {
	// topic is the entries' topic: our sink maps it to the destination
	// with its default mapping.
	topic() string
	// sink returns our sink into the destination, as Dial builds it,
	// and the function that closes it.
	sink(ctx context.Context) (outbox.Sink, func(), error)
	// rawPublish publishes every message with the broker's raw client,
	// each with its entry ID ids[i], waits for every acknowledgement and
	// marks each acknowledged message in tr.
	rawPublish(ctx context.Context, m *messages, ids []string, tr *tracker) error
	// held is how many messages the destination holds.
	held(ctx context.Context) (int, error)
	// consume marks every message that arrives from now on in tr (keys
	// from m), until stop.
	consume(ctx context.Context, m *messages, tr *tracker) (stop func(), err error)
	close()
}

// destTag makes destination names unique to this run (a random part) and
// to each destination (a counter).
var (
	destRun = strconv.FormatUint(rand.Uint64()&0xffffff, 36)
	destSeq atomic.Int64
)

func newDestTag() string {
	return destRun + "_" + strconv.FormatInt(destSeq.Add(1), 10)
}

// keyFrom returns the key of the harness message with body b (the key
// comes from the message set, so the order check does not depend on how
// a sink carries keys), or "" for a foreign body.
func keyFrom(m *messages, b []byte) string {
	seq, _, err := parsePayload(b)
	if err != nil || seq < 0 || seq >= len(m.keys) {
		return ""
	}
	return m.keys[seq]
}

// redact hides the password of a broker URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}

// brokerDialers are the brokers of the broker workloads: the workload's
// name, the environment variable of the broker's URL, its default (the
// tests' default, internal/testenv), and how to connect.
var brokerDialers = []struct {
	name, env, def string
	dial           func(context.Context, string) (brokerTarget, error)
}{
	{"nats", "OUTBOX_NATS_URL", "nats://127.0.0.1:4222", dialNATSTarget},
	{"rabbitmq", "OUTBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/", dialAMQPTarget},
}

// brokerWorkload runs one round of the workloads of broker name. It
// connects in the first round; a broker that cannot be reached has its
// workloads left out with a message (the run fails under
// OUTBOX_REQUIRE_SERVICES=1, as the tests do).
func (s *Suite) brokerWorkload(ctx context.Context, name string) error {
	t, ok := s.keep["broker."+name].(brokerTarget)
	if !ok {
		for _, b := range brokerDialers {
			if b.name != name {
				continue
			}
			u := envOr(b.env, b.def)
			var err error
			if t, err = b.dial(ctx, u); err != nil {
				msg := fmt.Sprintf("%s at %s is not reachable (%v); start it or set %s", name, redact(u), err, b.env)
				if os.Getenv("OUTBOX_REQUIRE_SERVICES") == "1" {
					return errors.New(msg)
				}
				s.logf("%s: its rows are skipped", msg)
				s.keep["broker."+name] = brokerTarget{}
				return nil
			}
			s.keep["broker."+name] = t
			s.cleanups = append(s.cleanups, t.close)
		}
	}
	return s.broker(ctx, t)
}

// brokerSubs are the workloads of a broker as -only and -skip see them.
var brokerSubs = []string{"raw publish", "sink alone", "postgres drain", "redis drain", "hot key", "W3 latency"}

// brokerSelected reports whether any workload of broker name runs.
func (s *Suite) brokerSelected(name string) bool {
	for _, sub := range brokerSubs {
		if s.brokerSubSelected(name, sub) {
			return true
		}
	}
	return false
}

// brokerSubSelected reports whether the workload sub of broker name runs:
// -only matches "name sub" or the broker's name, and -skip matches
// neither.
func (s *Suite) brokerSubSelected(name, sub string) bool {
	full := name + " " + sub
	if s.skipped(full) || s.skipped(name) {
		return false
	}
	return s.cfg.Only == nil || s.cfg.Only.MatchString(full) || s.cfg.Only.MatchString(name)
}

// broker runs one round of a broker's workloads. The raw publish runs
// first, so the drains' ratios against it share the round's load.
func (s *Suite) broker(ctx context.Context, b brokerTarget) error {
	if b.open == nil {
		return nil // not reachable: said in the first round
	}
	var errs []error
	step := func(sub string, fn func() error) {
		if ctx.Err() != nil || !s.brokerSubSelected(b.name, sub) {
			return
		}
		s.settle(ctx)
		t0 := time.Now()
		if err := fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sub, err))
			s.fail("%s %s: %v", b.name, sub, err)
		}
		s.logf("   %s %s took %s", b.name, sub, time.Since(t0).Round(100*time.Millisecond))
	}
	msgs := newMessages(s.cfg.N, 12)
	step("raw publish", func() error { return s.brokerRaw(ctx, b, msgs) })
	step("sink alone", func() error { return s.brokerSinkAlone(ctx, b, msgs) })
	for _, t := range []target{s.postgresTarget(), s.redisTarget()} {
		step(t.name+" drain", func() error { return s.brokerDrain(ctx, b, t, msgs) })
	}
	step("hot key", func() error { return s.brokerHotKey(ctx, b, s.postgresTarget()) })
	step("W3 latency", func() error { return s.brokerLatency(ctx, b, s.postgresTarget()) })
	return errors.Join(errs...)
}

// brokerRaw: the raw client publishes the N messages, with fresh entry
// IDs, into a fresh destination; timed from the first publish until every
// acknowledgement arrived; then read back.
func (s *Suite) brokerRaw(ctx context.Context, b brokerTarget, msgs *messages) error {
	n := len(msgs.keys)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = outbox.NewID()
	}
	d, err := b.open(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	tr := newTracker(n)
	c0 := readCPU(b.server)
	start := time.Now()
	err = d.rawPublish(ctx, msgs, ids, tr)
	el := time.Since(start)
	if err != nil {
		return err
	}
	if self, srv, ok := perEntry(c0, readCPU(b.server), n); ok {
		s.logf("raw %s publish CPU per entry: this process %v, %s %v, wall %v", b.name, self, b.server, srv, el/time.Duration(n))
	}
	c := tr.counts_()
	if err := c.check(false); err != nil {
		return fmt.Errorf("acknowledged: %w", err)
	}
	if err := s.readBackChecked(ctx, d, msgs, n); err != nil {
		return err
	}
	s.sr("raw."+b.key+".publish").add(rate(n, el), &c)
	s.record("raw."+b.key+".publish", fmt.Sprintf("%s publish, %s records", b.title, human(n)), b.raw, "entries/s", true, s.sr("raw."+b.key+".publish"), "first publish to last acknowledgement; read back and checked")
	return nil
}

// brokerSinkAlone: our sink alone, with no store and no relay, publishes
// the N messages as the relay hands them over (Publish calls of
// DefaultMaxInFlight entries, one after the other, as one relay worker
// does); timed from the first call to the last one's return; then read
// back. Between the raw client and the drains, it tells the sink's share
// of a gap from the store's and the relay's.
func (s *Suite) brokerSinkAlone(ctx context.Context, b brokerTarget, msgs *messages) error {
	n := len(msgs.keys)
	d, err := b.open(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	sink, closeSink, err := d.sink(ctx)
	if err != nil {
		return err
	}
	defer closeSink()
	es := make([]outbox.Entry, n)
	for i := range es {
		es[i] = outbox.Entry{ID: outbox.NewID(), Topic: d.topic(), Key: msgs.keys[i], Payload: msgs.payload[i], CreatedAt: time.Now()}
	}
	tr := newTracker(n)
	as := ackSink{inner: sink, tr: tr}
	c0 := readCPU(b.server)
	start := time.Now()
	for lo := 0; lo < n; lo += outbox.DefaultMaxInFlight {
		batch := es[lo:min(lo+outbox.DefaultMaxInFlight, n)]
		if err := errors.Join(as.Publish(ctx, batch)...); err != nil {
			return fmt.Errorf("publish of entries %d-%d: %w", lo, lo+len(batch)-1, err)
		}
	}
	el := time.Since(start)
	if self, srv, ok := perEntry(c0, readCPU(b.server), n); ok {
		s.logf("%s sink alone CPU per entry: this process %v, %s %v, wall %v", b.name, self, b.server, srv, el/time.Duration(n))
	}
	c := tr.counts_()
	if err := c.check(false); err != nil {
		return fmt.Errorf("acknowledged: %w", err)
	}
	if err := s.readBackChecked(ctx, d, msgs, n); err != nil {
		return err
	}
	key := "ours.sink." + b.key + ".alone"
	s.sr(key).add(rate(n, el), &c)
	s.record(key, fmt.Sprintf("%s publish, %s records", b.title, human(n)), b.sink+" alone, Publish calls of "+strconv.Itoa(outbox.DefaultMaxInFlight)+" one after the other", "entries/s", true, s.sr(key), "no store, no relay: the sink's share of the drain; read back and checked")
	return nil
}

// readBack checks d holds exactly n messages, then reads them and marks
// them in tr (keys from m) until every one arrived.
func readBack(ctx context.Context, d destination, m *messages, n int, tr *tracker) error {
	held, err := d.held(ctx)
	if err != nil {
		return err
	}
	if held != n {
		return fmt.Errorf("count wrong: the broker holds %d messages, want %d", held, n)
	}
	stop, err := d.consume(ctx, m, tr)
	if err != nil {
		return err
	}
	defer stop()
	return tr.wait(ctx, drainTimeout(n))
}

// readBackChecked reads a destination's n messages back and checks them:
// each message once, each key's messages in order.
func (s *Suite) readBackChecked(ctx context.Context, d destination, msgs *messages, n int) error {
	back := newTracker(n)
	if err := readBack(ctx, d, msgs, n, back); err != nil {
		return fmt.Errorf("read-back: %w", err)
	}
	if err := back.counts_().check(false); err != nil {
		return fmt.Errorf("read-back: %w", err)
	}
	return nil
}

// brokerDrainPartitions is the partition count of the outbox the broker
// drains read. One relay works its partitions concurrently, so this is
// how many Publish calls it has in flight: with 8 and its default
// MaxInFlight (500), up to 4,000 messages, as many as the raw clients keep
// pending. With one partition the relay has one call of at most 500 in
// flight and its pipeline empties at every batch (waiting for the last
// acknowledgement, then MarkSent), which bounded the NATS drain at
// 0.32-0.47x the raw client (bench/analysis.md).
const brokerDrainPartitions = 8

// brokerDrain: one relay drains the N backlog of a fresh outbox of t
// (brokerDrainPartitions partitions) through our sink into a fresh
// destination; timed from Start until the sink reported every entry
// published; then read back.
func (s *Suite) brokerDrain(ctx context.Context, b brokerTarget, t target, msgs *messages) error {
	n := len(msgs.keys)
	c, el, err := s.drainToBroker(ctx, b, t, msgs, brokerDrainPartitions)
	if err != nil {
		return err
	}
	key := "ours." + t.key + ".drain." + b.key
	s.sr(key).add(rate(n, el), &c)
	s.record(key, s.drainTitle(t.title, "to "+b.title), "outbox/"+t.name+" relay → "+b.sink, "entries/s", true, s.sr(key), fmt.Sprintf("1 relay, defaults, %d partitions; sink as Dial builds it; read back and checked", brokerDrainPartitions))
	return nil
}

// drainToBroker fills a fresh outbox of t (partitions partitions) with
// msgs, 100 per transaction, and drains it with one relay (defaults)
// through our sink into a fresh destination of b, then reads the
// destination back and checks it.
func (s *Suite) drainToBroker(ctx context.Context, b brokerTarget, t target, msgs *messages, partitions int) (Counts, time.Duration, error) {
	n := len(msgs.keys)
	d, err := b.open(ctx)
	if err != nil {
		return Counts{}, 0, err
	}
	defer d.close()
	in, err := t.open(ctx, partitions)
	if err != nil {
		return Counts{}, 0, err
	}
	defer in.close()
	if _, err := in.fillTo(ctx, msgs, 100, d.topic()); err != nil {
		return Counts{}, 0, err
	}
	sink, closeSink, err := d.sink(ctx)
	if err != nil {
		return Counts{}, 0, err
	}
	defer closeSink()
	tr := newTracker(n)
	c0 := readCPU(b.server)
	el, err := s.drainRelay(ctx, in.store, ackSink{inner: sink, tr: tr}, tr, 1, nil)
	if self, srv, ok := perEntry(c0, readCPU(b.server), n); ok && err == nil {
		s.logf("%s drain to %s CPU per entry: relay process %v, %s %v, wall %v", t.name, b.name, self, b.server, srv, el/time.Duration(n))
	}
	c := tr.counts_()
	if err == nil {
		err = c.check(false)
	}
	if err == nil {
		err = in.expectPending(ctx, 0)
	}
	if err == nil {
		err = s.readBackChecked(ctx, d, msgs, n)
	}
	return c, el, err
}

// Hot key against brokers: hotN entries of one key, and as many over
// hotKeys keys, on hotPartitions partitions, drained through our sink
// (brokerHotQuickN with -quick).
const hotKeys, brokerHotQuickN = 1000, 500

// keyedMessages returns n messages over keys keys, round robin.
func keyedMessages(n, keys int) *messages {
	m := &messages{keys: make([]string, n), keySeq: make([]int, n), payload: make([][]byte, n)}
	for i := range n {
		m.keys[i], m.keySeq[i] = "agg-"+strconv.Itoa(i%keys), i/keys
		m.payload[i] = payload(i, m.keySeq[i])
	}
	return m
}

// brokerHotKey: one key against hotKeys keys, a fresh backlog of each
// per round, drained through our sink and read back.
func (s *Suite) brokerHotKey(ctx context.Context, b brokerTarget, t target) error {
	n := hotN
	if s.cfg.Quick {
		n = brokerHotQuickN
	}
	for _, shape := range []struct {
		name, label string
		keys        int
	}{{"one", "one key", 1}, {"many", fmt.Sprintf("%s keys", human(hotKeys)), hotKeys}} {
		c, el, err := s.drainToBroker(ctx, b, t, keyedMessages(n, shape.keys), hotPartitions)
		if err != nil {
			return fmt.Errorf("%s: %w", shape.label, err)
		}
		key := "ours." + t.key + ".hot." + b.key + "." + shape.name
		s.sr(key).add(rate(n, el), &c)
		s.record(key, fmt.Sprintf("%s, %s entries of %s to %s", t.title, human(n), shape.label, b.title), "outbox/"+t.name+" relay → "+b.sink, "entries/s", true, s.sr(key),
			fmt.Sprintf("1 relay, defaults, %d partitions, sink as Dial builds it; read back and checked", hotPartitions))
	}
	return nil
}

// brokerCarrier carries a fresh outbox's entries through one relay and our
// sink into a fresh destination of b, where a consumer marks their
// arrival in tr: W3 with the broker in the path.
func (s *Suite) brokerCarrier(b brokerTarget) carrier {
	return func(ctx context.Context, store outbox.Store, m *messages, tr *tracker) (string, func(), error) {
		d, err := b.open(ctx)
		if err != nil {
			return "", nil, err
		}
		stopConsumer, err := d.consume(ctx, m, tr)
		if err != nil {
			d.close()
			return "", nil, err
		}
		sink, closeSink, err := d.sink(ctx)
		if err != nil {
			stopConsumer()
			d.close()
			return "", nil, err
		}
		stopRelay, err := s.startRelay(ctx, store, sink)
		if err != nil {
			closeSink()
			stopConsumer()
			d.close()
			return "", nil, err
		}
		return d.topic(), func() { stopRelay(); closeSink(); stopConsumer(); d.close() }, nil
	}
}

// brokerLatency: the sustainable end-to-end rate with the broker in the
// path, then commit-to-arrival at half of it (wake-ups).
func (s *Suite) brokerLatency(ctx context.Context, b brokerTarget, t target) error {
	c := s.brokerCarrier(b)
	label := t.name + " to " + b.name
	prefix := "ours." + t.key + ".lat." + b.key
	sys := "outbox/" + t.name + " relay → " + b.sink + " → consumer"
	sus := s.sr(prefix + ".sustainable")
	// With -quick no search (the probes are W3's, checked there), and a
	// short run at half the search's first rate: the harness is checked,
	// not the rate.
	r, maxD := searchFrom, s.cfg.LatencyD/2
	if !s.cfg.Quick {
		var cn Counts
		var err error
		if r, cn, err = s.sustainableRate(ctx, t, c, label, searchUpTo); err != nil {
			return fmt.Errorf("sustainable rate: %w", err)
		}
		sus.add(r, &cn)
		s.record(prefix+".sustainable", fmt.Sprintf("%s sustainable end-to-end rate to %s, %d callers, 1 relay, a consumer", t.title, b.title, latCallers), sys, "entries/s", true, sus, sustainableRule)
		maxD = s.cfg.LatencyD
	}

	arr := r / 2
	n := min(s.cfg.LatencyN, int(arr*maxD.Seconds()))
	asked, got, perTx := s.sr(prefix+".asked"), s.sr(prefix+".rate"), s.sr(prefix+".pertx")
	p50, p99, pmax, busy := s.sr(prefix+".p50"), s.sr(prefix+".p99"), s.sr(prefix+".max"), s.sr(prefix+".busy")
	in, err := t.open(ctx, 1)
	if err != nil {
		return err
	}
	res, err := s.latencyRun(ctx, t, in, in.store, c, n, arr, maxD)
	in.close()
	if err != nil {
		return fmt.Errorf("half load: %w", err)
	}
	res.add(arr, asked, got, perTx, p50, p99, pmax, busy)
	w := fmt.Sprintf("%s commit-to-%s-consumer, %.0f/s (half of the sustainable rate to %s, wake-ups)", t.title, b.name, asked.median(), b.title)
	recordLatency(s, prefix, w, sys, fmt.Sprintf("at most %d entries or %s per run; latency = the consumer's receipt − the caller's Commit return", n, maxD), asked, got, perTx, p50, p99, pmax, busy)
	return nil
}

// brokerComparisons are the targets table's rows of the broker workloads.
func brokerComparisons() []comparison {
	var out []comparison
	for _, b := range []struct{ key, title string }{{"nats", "NATS JetStream"}, {"amqp", "RabbitMQ"}} {
		for _, t := range []struct{ key, title string }{{"pg", "Postgres"}, {"redis", "Redis"}} {
			out = append(out, comparison{group: fmt.Sprintf("%s drain, 100k backlog, to %s, vs the raw client publishing the same records", t.title, b.title),
				ours: "ours." + t.key + ".drain." + b.key, other: "raw." + b.key + ".publish", target: 0.8})
		}
		out = append(out,
			comparison{group: fmt.Sprintf("%s: our sink alone (no store, no relay) vs the raw client", b.title), ours: "ours.sink." + b.key + ".alone", other: "raw." + b.key + ".publish"},
			comparison{group: fmt.Sprintf("%s: the Postgres drain vs our sink alone (what the store and the relay add)", b.title), ours: "ours.pg.drain." + b.key, other: "ours.sink." + b.key + ".alone"},
			comparison{group: fmt.Sprintf("Postgres to %s, one key vs %s keys", b.title, human(hotKeys)), ours: "ours.pg.hot." + b.key + ".one", other: "ours.pg.hot." + b.key + ".many", target: 0.3},
			comparison{group: fmt.Sprintf("Postgres sustainable end-to-end rate to %s (32 callers, 1 relay, a consumer)", b.title), ours: "ours.pg.lat." + b.key + ".sustainable"},
			comparison{group: fmt.Sprintf("Postgres commit-to-%s-consumer p99, half of that rate, wake-ups", strings.ToLower(strings.Fields(b.title)[0])), ours: "ours.pg.lat." + b.key + ".p99"},
		)
	}
	return out
}
