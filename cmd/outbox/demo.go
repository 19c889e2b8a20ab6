package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

type demoConfig struct {
	entries    int
	keys       int
	partitions int
	batch      int
	failRate   float64
	poison     int
	rollback   float64
	seed       uint64
	timeout    time.Duration
	progress   time.Duration
	backend    string
	postgres   string
	redisURL   string
}

func runDemo(args []string, out io.Writer) error {
	var c demoConfig
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.IntVar(&c.entries, "entries", 5000, "entries to append")
	fs.IntVar(&c.keys, "keys", 50, "distinct keys (aggregates) the entries are spread over")
	fs.IntVar(&c.partitions, "partitions", 4, "outbox partitions")
	fs.IntVar(&c.batch, "batch", 100, "relay batch size")
	fs.Float64Var(&c.failRate, "fail-rate", 0.1, "probability that a publish attempt fails with a transient broker error")
	fs.IntVar(&c.poison, "poison", 5, "entries the broker rejects permanently (they end parked)")
	fs.Float64Var(&c.rollback, "rollback", 0.05, "probability that an appending transaction rolls back")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed for keys and injected failures")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up (and fail) after this long")
	fs.DurationVar(&c.progress, "progress", 500*time.Millisecond, "interval of the progress line")
	fs.StringVar(&c.backend, "backend", "memory", "outbox backend: memory, postgres or redis (these two in a fresh schema / key prefix, removed afterwards)")
	fs.StringVar(&c.postgres, "postgres", envOr("OUTBOX_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL URL for -backend postgres")
	fs.StringVar(&c.redisURL, "redis", envOr("OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL for -backend redis")
	fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case c.entries < 1 || c.keys < 1 || c.partitions < 2 || c.batch < 1:
		return errors.New("demo: -entries, -keys and -batch must be positive and -partitions at least 2")
	case c.poison > c.entries/2:
		return errors.New("demo: -poison must be at most half of -entries")
	case c.failRate < 0 || c.failRate >= 0.9 || c.rollback < 0 || c.rollback >= 1:
		return errors.New("demo: -fail-rate must be in [0, 0.9) and -rollback in [0, 1)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	return demo(ctx, c, out)
}

const demoTopic = "orders"

func demo(ctx context.Context, c demoConfig, out io.Writer) error {
	start := time.Now()
	logger := slog.New(slog.DiscardHandler)

	// An in-process Kafka speaking the real protocol.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, demoTopic))
	if err != nil {
		return fmt.Errorf("starting the in-process Kafka: %w", err)
	}
	defer cluster.Close()
	kafka, err := kafkasink.Dial(cluster.ListenAddrs(), kafkasink.Options{})
	if err != nil {
		return err
	}
	defer kafka.Close()

	db, err := openDemoBackend(ctx, c)
	if err != nil {
		return err
	}
	defer db.close()
	backend := db.store

	w := newWorld(c)
	fmt.Fprintf(out, "outbox demo: %s backend with %d partitions, in-process Kafka (kfake), 2 relays; "+
		"%d entries over %d keys, %.0f%% of attempts fail, %d poison entries\n",
		db.name, c.partitions, c.entries, c.keys, c.failRate*100, c.poison)

	// Consume the topic back and check what arrived.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(demoTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer consumer.Close()
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	var consumed sync.WaitGroup
	consumed.Go(func() { w.consume(consumeCtx, consumer) })

	sink := &faultySink{next: kafka, w: w}
	relayOpts := func(owner string) outbox.RelayOptions {
		return outbox.RelayOptions{
			Owner: owner, BatchSize: c.batch, PollInterval: 200 * time.Millisecond,
			LeaseTTL: 3 * time.Second, MaxPartitions: (c.partitions + 1) / 2, AcquireInterval: 100 * time.Millisecond,
			Backoff: backoff.Policy{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond}, Logger: logger,
		}
	}
	relays := map[string]*outbox.Relay{}
	for _, name := range []string{"relay-A", "relay-B"} {
		r, err := outbox.NewRelay(backend, sink, relayOpts(name))
		if err != nil {
			return err
		}
		if err := r.Start(ctx); err != nil {
			return err
		}
		relays[name] = r
	}

	// Append in transactions from four goroutines.
	var appending sync.WaitGroup
	for g := range 4 {
		appending.Go(func() { w.appendLoop(ctx, db.appendTx, g) })
	}

	// Halfway, relay A stops and relay C takes its partitions over.
	handover := ""
	tick := time.NewTicker(c.progress)
	defer tick.Stop()
	appendDone := make(chan struct{})
	go func() { appending.Wait(); close(appendDone) }()
	check := time.NewTicker(20 * time.Millisecond)
	defer check.Stop()
	appended := false
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out)
			return fmt.Errorf("timed out: %s", w.progress())
		case <-appendDone:
			appended, appendDone = true, nil
		case <-tick.C:
			fmt.Fprintf(out, "  %s\n", w.progress())
		case <-check.C:
		}
		if handover == "" && w.firstDelivered.Load() > int64(c.entries/2) {
			a := relays["relay-A"]
			held := a.Stats().PartitionsHeld
			if err := a.Stop(ctx); err != nil {
				return err
			}
			r, err := outbox.NewRelay(backend, sink, relayOpts("relay-C"))
			if err != nil {
				return err
			}
			if err := r.Start(ctx); err != nil {
				return err
			}
			relays["relay-C"] = r
			handover = fmt.Sprintf("relay-A stopped after %d deliveries holding %d partitions; relay-C took them over",
				w.firstDelivered.Load(), held)
			fmt.Fprintf(out, "  %s\n", handover)
		}
		if appended && w.settled() {
			break
		}
	}
	for name, r := range relays {
		if err := r.Stop(ctx); err != nil {
			return fmt.Errorf("stopping %s: %w", name, err)
		}
	}
	stopConsuming()
	consumed.Wait()
	return w.report(ctx, out, db.inspector, relays, handover, time.Since(start))
}

// world holds what the demo appended and what arrived.
type world struct {
	c demoConfig

	mu         sync.Mutex
	rng        *rand.Rand
	nextSeq    map[string]int       // per key, the next sequence number
	committed  map[string]entryInfo // by ID
	rolledBack map[string]bool
	poison     map[string]bool
	txs, rbTxs int
	arrivals   map[string]int // by ID: how many times it arrived
	lastSeq    map[string]int // per key: the seq of the last first arrival
	violations []string

	appendedN      atomic.Int64
	firstDelivered atomic.Int64
	attempts       atomic.Int64
	injected       atomic.Int64
}

type entryInfo struct {
	key string
	seq int
}

func newWorld(c demoConfig) *world {
	return &world{
		c:          c,
		rng:        rand.New(rand.NewPCG(c.seed, 42)),
		nextSeq:    map[string]int{},
		committed:  map[string]entryInfo{},
		rolledBack: map[string]bool{},
		poison:     map[string]bool{},
		arrivals:   map[string]int{},
		lastSeq:    map[string]int{},
	}
}

// appendLoop appends transactions of 1-8 entries until the quota is used.
// Sequence numbers are assigned and the transaction committed under one
// lock, so per key, sequence order is commit order, the order the outbox
// must keep.
func (w *world) appendLoop(ctx context.Context, appendTx func(context.Context, []outbox.Entry, bool) error, g int) {
	for ctx.Err() == nil {
		w.mu.Lock()
		remaining := w.c.entries - len(w.committed)
		if remaining <= 0 {
			w.mu.Unlock()
			return
		}
		n := min(1+w.rng.IntN(8), remaining)
		rollback := w.rng.Float64() < w.c.rollback
		entries := make([]outbox.Entry, n)
		infos := make([]entryInfo, n)
		for i := range entries {
			key := "order-" + strconv.Itoa(w.rng.IntN(w.c.keys))
			infos[i] = entryInfo{key: key, seq: w.nextSeq[key]}
			if !rollback {
				w.nextSeq[key]++
			}
			entries[i] = outbox.Entry{
				ID:      outbox.NewID(),
				Topic:   demoTopic,
				Key:     key,
				Payload: fmt.Appendf(nil, `{"order":%q,"seq":%d,"writer":%d}`, key, infos[i].seq, g),
				Headers: map[string]string{"content-type": "application/json"},
			}
		}
		err := appendTx(ctx, entries, rollback)
		if err == nil {
			w.txs++
			for i, e := range entries {
				if rollback {
					w.rolledBack[e.ID] = true
					continue
				}
				w.committed[e.ID] = infos[i]
				if len(w.poison) < w.c.poison && w.rng.IntN(w.c.entries) < 2*w.c.poison {
					w.poison[e.ID] = true
				}
			}
			if rollback {
				w.rbTxs++
			} else {
				w.appendedN.Add(int64(n))
			}
		}
		w.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			panic(fmt.Sprintf("demo: append failed: %v", err))
		}
		time.Sleep(time.Duration(w.rng.IntN(300)) * time.Microsecond)
	}
}

func (w *world) consume(ctx context.Context, cl *kgo.Client) {
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			id := kafkasink.EntryID(rec)
			w.mu.Lock()
			defer w.mu.Unlock()
			w.arrivals[id]++
			if w.arrivals[id] > 1 {
				return // a duplicate: consumers dedupe by the entry ID
			}
			info, ok := w.committed[id]
			switch {
			case w.rolledBack[id]:
				w.violations = append(w.violations, "entry "+id+" of a rolled-back transaction arrived")
			case !ok:
				w.violations = append(w.violations, "unknown entry "+id+" arrived")
			case string(rec.Key) != info.key:
				w.violations = append(w.violations, fmt.Sprintf("entry %s arrived with key %q, want %q", id, rec.Key, info.key))
			default:
				if last, seen := w.lastSeq[info.key]; seen && info.seq < last {
					w.violations = append(w.violations, fmt.Sprintf("key %s: seq %d arrived after seq %d", info.key, info.seq, last))
				}
				w.lastSeq[info.key] = info.seq
				w.firstDelivered.Add(1)
			}
		})
	}
}

// settled reports whether every committed entry arrived or is poison.
func (w *world) settled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.committed) == w.c.entries && int(w.firstDelivered.Load())+len(w.poison) >= w.c.entries
}

func (w *world) progress() string {
	return fmt.Sprintf("appended %d/%d, arrived in Kafka %d, publish attempts %d (%d failed on purpose)",
		w.appendedN.Load(), w.c.entries, w.firstDelivered.Load(), w.attempts.Load(), w.injected.Load())
}

func (w *world) report(ctx context.Context, out io.Writer, b outbox.Inspector, relays map[string]*outbox.Relay, handover string, took time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var published, retried, parked int64
	for _, r := range relays {
		s := r.Stats()
		published, retried, parked = published+s.Published, retried+s.Retried, parked+s.Parked
	}
	parkedEntries, err := b.Parked(ctx, "", 10*w.c.poison+10)
	if err != nil {
		return err
	}
	parkedOK := len(parkedEntries) == len(w.poison)
	for _, e := range parkedEntries {
		parkedOK = parkedOK && w.poison[e.ID]
	}
	duplicates, lost := 0, 0
	for id := range w.committed {
		switch n := w.arrivals[id]; {
		case n == 0 && !w.poison[id]:
			lost++
		case n > 1:
			duplicates += n - 1
		}
	}
	rbEntries := len(w.rolledBack)

	fmt.Fprintf(out, "\nappended   %d entries in %d committed transactions across %d keys (%d transactions with %d entries rolled back)\n",
		len(w.committed), w.txs-w.rbTxs, w.c.keys, w.rbTxs, rbEntries)
	fmt.Fprintf(out, "published  %d entries acknowledged by Kafka; %d arrived, %d duplicates (deduped by the outbox-id header)\n",
		published, int(w.firstDelivered.Load()), duplicates)
	fmt.Fprintf(out, "retried    %d failed attempts re-scheduled with backoff (%d injected broker errors)\n", retried, w.injected.Load())
	fmt.Fprintf(out, "parked     %d entries after a permanent error (%d poison entries injected)\n", parked, len(w.poison))
	if handover != "" {
		fmt.Fprintf(out, "handover   %s\n", handover)
	}
	fmt.Fprintf(out, "order      per-key order checked over %d keys: %d violations\n", len(w.lastSeq), len(w.violations))
	fmt.Fprintf(out, "lost       %d\n", lost)
	fmt.Fprintf(out, "took       %v\n", took.Round(time.Millisecond))
	var problems []string
	if lost > 0 {
		problems = append(problems, fmt.Sprintf("%d entries lost", lost))
	}
	if !parkedOK {
		problems = append(problems, fmt.Sprintf("parked entries (%d) are not exactly the poison entries (%d)", len(parkedEntries), len(w.poison)))
	}
	for i, v := range w.violations {
		if i == 5 {
			problems = append(problems, fmt.Sprintf("... and %d more", len(w.violations)-5))
			break
		}
		problems = append(problems, v)
	}
	if len(problems) > 0 {
		fmt.Fprintln(out, "FAILED")
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Fprintln(out, "OK: every committed entry was delivered or parked, in per-key order; nothing rolled back was published")
	return nil
}

// faultySink injects broker failures in front of the Kafka sink: transient
// errors at random, permanent ones for the poison entries.
type faultySink struct {
	next outbox.Sink
	w    *world
}

func (s *faultySink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	errs := make([]error, len(msgs))
	var pass []outbox.Entry
	var at []int
	s.w.mu.Lock()
	for i, m := range msgs {
		s.w.attempts.Add(1)
		switch {
		case s.w.poison[m.ID]:
			errs[i] = backoff.Permanent(errors.New("broker: record rejected (injected poison entry)"))
		case s.w.rng.Float64() < s.w.c.failRate:
			s.w.injected.Add(1)
			errs[i] = errors.New("broker: NOT_LEADER_OR_FOLLOWER (injected)")
		default:
			pass, at = append(pass, m), append(at, i)
		}
	}
	s.w.mu.Unlock()
	if len(pass) > 0 {
		for j, err := range s.next.Publish(ctx, pass) {
			errs[at[j]] = err
		}
	}
	return errs
}
