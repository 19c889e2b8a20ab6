package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

// The inbox workloads (issue 31): what the consuming half costs. A
// consumer reads records from kfake (in process) and, per transaction,
// inserts one effect row per record; with the inbox it also records each
// record's ID, its key's sequence number and its partition's next offset
// in the same transaction (what package kafkainbox does), without it it
// only inserts the rows. Both read the same topic in the same round, on
// the same database, one transaction at a time: the per-record cost is
// the ratio of the two rates. The effect table is then checked: every
// record's effect exactly once, each key's effects in order; and the
// first records are handed to the inbox again, which must skip them all.
const (
	// inboxTopic is the kfake topic the inbox workloads consume.
	inboxTopic = "bench-inbox"
	// inboxPartitions is its partition count: 8, as the group row's.
	inboxPartitions = 8
	// inboxGroup is the consumer group of the stored offsets.
	inboxGroup = "bench-inbox"
	// inboxBatch is the batched variant's records per transaction.
	inboxBatch = 100
	// inboxRedeliver is how many records are handed to the inbox again
	// after a timed run, to check it skips them.
	inboxRedeliver = 100

	inboxN1      = 3000 // records of the 1-per-transaction rows, full run (or N if smaller)
	inboxQuickN1 = 100  // with -quick
	inboxQuickN  = 1000 // records of the batched and group rows with -quick (full run: N)
)

// inboxSide is one fresh, empty effect table with an inbox store next to
// it, in the database of one store.
type inboxSide[Tx any] struct {
	store inbox.Store[Tx]
	// effect inserts rec's effect row in tx: what the handler does, with
	// the inbox or without.
	effect func(ctx context.Context, tx Tx, rec *kgo.Record) error
	// plain is the consumer without the inbox: it inserts recs' effect
	// rows in one transaction of the database and commits it, adding
	// the time of its phases to p.
	plain func(ctx context.Context, p *phases, recs []*kgo.Record) error
	// counts reads the effect table back: Delivered is the number of
	// distinct records of 0..n-1 with an effect, Duplicates the extra
	// rows, OrderViolations the rows of a key after a later one of it.
	counts func(ctx context.Context, n int) (Counts, error)
	// close drops what open made.
	close func()
}

// inboxTarget is one inbox store as the inbox workloads see it.
type inboxTarget[Tx any] struct {
	name   string // "postgres"
	key    string // result key part: "pg"
	title  string // "Postgres"
	store  string // the store's name in the rows: "pginbox"
	effect string // the effect's command in the rows: "INSERT"
	plain  string // the plain transaction in the rows: "pgx BEGIN+INSERT+COMMIT"
	open   func(ctx context.Context) (*inboxSide[Tx], error)
}

// inboxRecords are n records of the harness's messages, as the Kafka
// sink publishes outbox entries: the payload as the value, the key, and
// the headers outbox-id (a fresh entry ID) and outbox-key-seq (from 1).
func inboxRecords(n int, seed uint64) []*kgo.Record {
	msgs := newMessages(n, seed)
	recs := make([]*kgo.Record, n)
	for i := range n {
		recs[i] = &kgo.Record{
			Topic: inboxTopic,
			Key:   []byte(msgs.keys[i]),
			Value: msgs.payload[i],
			Headers: []kgo.RecordHeader{
				{Key: kafkasink.DefaultIDHeader, Value: []byte(outbox.NewID())},
				{Key: outbox.HeaderKeySeq, Value: []byte(outbox.FormatKeySeq(int64(msgs.keySeq[i] + 1)))},
			},
		}
	}
	return recs
}

// inboxCluster starts a kfake cluster with inboxTopic and produces recs
// into it (each key to one partition, in order).
func inboxCluster(ctx context.Context, recs []*kgo.Record) (*kfake.Cluster, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(inboxPartitions, inboxTopic))
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		cluster.Close()
		return nil, err
	}
	defer cl.Close()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for _, r := range recs {
		wg.Add(1)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if first != nil {
		cluster.Close()
		return nil, fmt.Errorf("producing to kfake: %w", first)
	}
	return cluster, nil
}

// consumeN reads n records of inboxTopic from the start of every
// partition, with a client of no group, and hands them to handle in
// slices of batch records (the last one shorter), in the order they were
// fetched (each partition's in order). It returns the time from its
// first poll to the last handle's return.
func consumeN(ctx context.Context, cluster *kfake.Cluster, n, batch int, handle func(ctx context.Context, recs []*kgo.Record) error) (time.Duration, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(inboxTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, inboxTimeout(n))
	defer cancel()
	start := time.Now()
	done := 0
	var buf []*kgo.Record
	for done < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("count wrong: consumed %d of %d records (%w)", done, n, err)
		}
		if err := fs.Err0(); err != nil {
			return 0, fmt.Errorf("fetching from kfake: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) { buf = append(buf, r) })
		for done < n && len(buf) > 0 && (len(buf) >= batch || len(buf) >= n-done) {
			k := min(batch, len(buf), n-done)
			if err := handle(ctx, buf[:k]); err != nil {
				return 0, err
			}
			done += k
			buf = buf[k:]
		}
	}
	return time.Since(start), nil
}

// inboxTimeout bounds a consumer run of n records: at 20 records/s it
// fails (a single consumer, one transaction at a time, on a loaded
// machine can be slower than a relay's 200 entries/s of drainTimeout).
func inboxTimeout(n int) time.Duration {
	return time.Duration(n/20+60) * time.Second
}

// inboxMessage is the inbox's view of a record, as the kafkainbox
// Consumer makes it: kafkainbox.Message with the partition's next offset.
func inboxMessage(rec *kgo.Record) (inbox.Message, error) {
	m, err := kafkainbox.Message(rec)
	if err != nil {
		return m, err
	}
	m.Offset = &inbox.Offset{Group: inboxGroup, Topic: rec.Topic, Partition: rec.Partition, Next: rec.Offset + 1}
	return m, nil
}

// plainHandler is the consumer without the inbox: one transaction per
// call, an effect row per record.
func plainHandler[Tx any](side *inboxSide[Tx], p *phases) func(ctx context.Context, recs []*kgo.Record) error {
	return func(ctx context.Context, recs []*kgo.Record) error { return side.plain(ctx, p, recs) }
}

// txPlain is the plain consumer of a store whose own transactions are of
// the inbox's Tx type (pgx.Tx, *sql.Tx): begin runs a function in one
// and commits it; effect inserts a row in it.
func txPlain[Tx any](begin func(context.Context, func(context.Context, Tx) error) error, effect func(context.Context, Tx, *kgo.Record) error) func(context.Context, *phases, []*kgo.Record) error {
	return func(ctx context.Context, p *phases, recs []*kgo.Record) error {
		return timedTx(ctx, p, begin, func(ctx context.Context, tx Tx) error {
			for _, r := range recs {
				t0 := time.Now()
				err := effect(ctx, tx, r)
				p.since("effect", t0)
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// consumerKind is what a consumer run of the per-record cost rows does
// besides inserting the effect rows.
type consumerKind int

const (
	// plainConsumer: no inbox, a transaction per batch of records.
	plainConsumer consumerKind = iota
	// inboxConsumer: the inbox with everything kafkainbox hands it: the
	// ID, the key's sequence number and the partition's next offset.
	inboxConsumer
	// idConsumer: the inbox with the ID only (no key, sequence number or
	// offset): what deduplication alone costs.
	idConsumer
	// splitConsumer: inboxConsumer with the store's optional interfaces
	// (inbox.KeyRecorder, inbox.Finisher) hidden, so the Inbox makes a
	// round trip per Store method: what the combined calls save.
	splitConsumer
)

// inboxHandler is the consumer with the inbox: one HandleBatch per call
// (Handle for one record), the same effect row per record; with idOnly
// the messages carry only their IDs. Every result must be want (Applied
// in a timed run, Duplicate for a redelivery).
func inboxHandler[Tx any](side *inboxSide[Tx], ib *inbox.Inbox[Tx], idOnly bool, want inbox.Outcome) func(ctx context.Context, recs []*kgo.Record) error {
	h := func(ctx context.Context, tx Tx, m inbox.Message) error {
		return side.effect(ctx, tx, m.Data.(*kgo.Record))
	}
	return func(ctx context.Context, recs []*kgo.Record) error {
		msgs := make([]inbox.Message, len(recs))
		for i, r := range recs {
			m, err := inboxMessage(r)
			if err != nil {
				return err
			}
			if idOnly {
				m = inbox.Message{ID: m.ID, Data: r}
			}
			msgs[i] = m
		}
		var results []inbox.Result
		if len(msgs) == 1 {
			r, err := ib.Handle(ctx, msgs[0], h)
			if err != nil {
				return err
			}
			results = []inbox.Result{r}
		} else {
			var err error
			if results, err = ib.HandleBatch(ctx, msgs, h); err != nil {
				return err
			}
		}
		for i, r := range results {
			if r.Outcome != want {
				return fmt.Errorf("count wrong: record %s/%d@%d: the inbox said %s, want %s", recs[i].Topic, recs[i].Partition, recs[i].Offset, r.Outcome, want)
			}
			if r.Gap != nil || r.Late {
				return fmt.Errorf("count wrong: record %s/%d@%d: the inbox reported a gap or a late record (%+v) on records sent in order", recs[i].Topic, recs[i].Partition, recs[i].Offset, r)
			}
		}
		return nil
	}
}

// inboxRun is one timed consumer run over a fresh side: n records of
// cluster, batch per transaction, by a consumer of kind. With the inbox,
// the first records are then handed to it again and must all be skipped.
// The effect table must hold every record once, in key order.
func inboxRun[Tx any](ctx context.Context, t inboxTarget[Tx], cluster *kfake.Cluster, n, batch int, kind consumerKind, p *phases) (Counts, time.Duration, error) {
	side, err := t.open(ctx)
	if err != nil {
		return Counts{}, 0, err
	}
	defer side.close()
	timed := side.timed(p, kind == splitConsumer)
	handle := plainHandler(side, p)
	if kind != plainConsumer {
		ib, err := inbox.New(timed.store, inbox.Options{Logger: oursLogger()})
		if err != nil {
			return Counts{}, 0, err
		}
		handle = inboxHandler(timed, ib, kind == idConsumer, inbox.Applied)
	}
	el, err := consumeN(ctx, cluster, n, batch, handle)
	if err != nil {
		return Counts{}, el, err
	}
	if kind != plainConsumer {
		// Redelivery, untimed: the same records again, in the same
		// batches, to an inbox over the same store; it must skip every
		// one.
		ib, err := inbox.New(side.store, inbox.Options{Logger: oursLogger()})
		if err != nil {
			return Counts{}, 0, err
		}
		k := min(inboxRedeliver, n)
		if _, err := consumeN(ctx, cluster, k, batch, inboxHandler(side, ib, kind == idConsumer, inbox.Duplicate)); err != nil {
			return Counts{}, el, fmt.Errorf("redelivering %d records: %w", k, err)
		}
	}
	c, err := side.counts(ctx, n)
	if err != nil {
		return c, el, err
	}
	return c, el, c.check(false)
}

// inboxCost runs one round of the per-record cost rows of t with batch
// records per transaction: the plain consumer and the one with the inbox
// over the same records; with one record per transaction also the inbox
// with the IDs only.
func inboxCost[Tx any](ctx context.Context, s *Suite, t inboxTarget[Tx], batch int) error {
	n := s.inboxN(batch)
	key := fmt.Sprintf("inbox.%s.rec%d", t.key, batch)
	kinds := []consumerKind{plainConsumer, inboxConsumer}
	// The IDs-only and the split consumers: not with -quick, to keep it
	// quick.
	more := batch == 1 && !s.cfg.Quick
	if more {
		kinds = append(kinds, idConsumer, splitConsumer)
	}
	suffix := map[consumerKind]string{plainConsumer: ".plain", inboxConsumer: ".inbox", idConsumer: ".id", splitConsumer: ".split"}
	recs := inboxRecords(n, uint64(20+batch))
	for run := range s.thisRun() {
		cluster, err := inboxCluster(ctx, recs)
		if err != nil {
			return err
		}
		var errs []error
		// Each round starts with another kind, so that no kind always
		// runs first after the cluster's fill (or last, into the next
		// workload).
		for i := range kinds {
			kind := kinds[(i+run)%len(kinds)]
			c, el, err := inboxRun(ctx, t, cluster, n, batch, kind, s.phases(key+suffix[kind]))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s run %d: %w", suffix[kind][1:], run+1, err))
				continue
			}
			s.sr(key+suffix[kind]).add(rate(n, el), &c)
		}
		cluster.Close()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	w := s.inboxCostTitle(t.title, n, batch)
	const one = "1 consumer, one transaction at a time"
	call := "inbox.Handle"
	if batch > 1 {
		call = "inbox.HandleBatch"
	}
	s.record(key+".plain", w, t.plain+", no inbox", "records/s", true, s.sr(key+".plain"), one+"; "+s.phases(key+".plain").String())
	s.record(key+".inbox", w, call+" ("+t.store+") + the same "+t.effect+"s", "records/s", true, s.sr(key+".inbox"),
		one+"; the inbox records the ID, the key's sequence number and the partition's offset, as kafkainbox does; "+s.phases(key+".inbox").String())
	if more {
		s.record(key+".id", w, call+" ("+t.store+"), IDs only, + the same "+t.effect+"s", "records/s", true, s.sr(key+".id"),
			one+"; messages without key, sequence number or offset: deduplication alone; "+s.phases(key+".id").String())
		s.record(key+".split", w, call+" ("+t.store+"), a round trip per Store method, + the same "+t.effect+"s", "records/s", true, s.sr(key+".split"),
			one+"; as the inbox row with the store's KeyRecorder and Finisher hidden; "+s.phases(key+".split").String())
	}
	return nil
}

// phases returns the phase times of the row key, kept across rounds.
func (s *Suite) phases(key string) *phases {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.keep["phases."+key].(*phases)
	if !ok {
		p = newPhases()
		s.keep["phases."+key] = p
	}
	return p
}

// inboxN is the record count of the rows with batch records per
// transaction.
func (s *Suite) inboxN(batch int) int {
	switch {
	case batch == 1 && s.cfg.Quick:
		return inboxQuickN1
	case batch == 1:
		return min(inboxN1, s.cfg.N)
	case s.cfg.Quick:
		return inboxQuickN
	}
	return s.cfg.N
}

// inboxCostTitle names a per-record cost row: "Postgres inbox, 10k
// records from kfake, 1 per tx".
func (s *Suite) inboxCostTitle(title string, n, batch int) string {
	return fmt.Sprintf("%s inbox, %s records from kfake, %d per tx, 1 consumer", title, human(n), batch)
}

// effectRow is one effect row of a store that cannot count them itself.
type effectRow struct {
	seq, keySeq int
	key         string
}

// effectCounts is what the SQL of a store's counts computes, over rows in
// insertion order.
func effectCounts(rows []effectRow, n int) Counts {
	c := Counts{Expected: n}
	seen := map[int]bool{}
	last := map[string]int{}
	for _, r := range rows {
		if r.seq < 0 || r.seq >= n {
			c.Foreign++
			continue
		}
		if seen[r.seq] {
			c.Duplicates++
		} else {
			seen[r.seq] = true
			c.Delivered++
		}
		if l, ok := last[r.key]; ok && r.keySeq < l {
			c.OrderViolations++
		}
		last[r.key] = r.keySeq
	}
	return c
}

// inboxStores are the stores of the inbox workloads, in their order,
// with their titles and result key parts.
var inboxStores = []struct{ name, key, title string }{
	{"postgres", "pg", "Postgres"},
	{"mysql", "my", "MySQL"},
	{"redis", "redis", "Redis"},
}

// inboxSubs are a store's inbox workloads as -only and -skip see them:
// "inbox postgres 1/tx", "inbox postgres 100/tx", and for PostgreSQL
// "inbox postgres group" ("-only inbox" runs them all, "-only 'inbox
// postgres'" those of one store).
func inboxSubs(store string) []string {
	subs := []string{store + " 1/tx", store + " " + strconv.Itoa(inboxBatch) + "/tx"}
	if store == "postgres" {
		subs = append(subs, store+" group")
	}
	return subs
}

// inboxSubSelected reports whether the inbox workload sub runs: -only
// matches "inbox sub" or "inbox", and -skip matches neither.
func (s *Suite) inboxSubSelected(sub string) bool {
	full := "inbox " + sub
	if s.skipped(full) || s.skipped("inbox") {
		return false
	}
	return s.cfg.Only == nil || s.cfg.Only.MatchString(full) || s.cfg.Only.MatchString("inbox")
}

// inboxStoreSelected reports whether any workload of store runs.
func (s *Suite) inboxStoreSelected(store string) bool {
	for _, sub := range inboxSubs(store) {
		if s.inboxSubSelected(sub) {
			return true
		}
	}
	return false
}

func (s *Suite) inboxSelected() bool {
	for _, st := range inboxStores {
		if s.inboxStoreSelected(st.name) {
			return true
		}
	}
	return false
}

// inboxSteps are the workloads of one store's target, in the order of
// inboxSubs.
func inboxSteps[Tx any](s *Suite, t inboxTarget[Tx]) []func(ctx context.Context) error {
	steps := []func(ctx context.Context) error{
		func(ctx context.Context) error { return inboxCost(ctx, s, t, 1) },
		func(ctx context.Context) error { return inboxCost(ctx, s, t, inboxBatch) },
	}
	if t.name == "postgres" {
		steps = append(steps, func(ctx context.Context) error { return inboxGroups(ctx, s, t) })
	}
	return steps
}

// inboxWorkload runs one round of the inbox workloads: PostgreSQL's,
// then MySQL's (when its server can be reached, as the MySQL workloads),
// then Redis's.
func (s *Suite) inboxWorkload(ctx context.Context) error {
	var errs []error
	for _, st := range inboxStores {
		if ctx.Err() != nil || !s.inboxStoreSelected(st.name) {
			continue
		}
		var steps []func(ctx context.Context) error
		switch st.name {
		case "postgres":
			steps = inboxSteps(s, s.pgInboxTarget())
		case "mysql":
			t, err := s.mysqlInboxTarget(ctx)
			if err != nil {
				errs = append(errs, err)
				s.fail("inbox mysql: %v", err)
				continue
			}
			if t == nil {
				continue // said once by s.mysql
			}
			steps = inboxSteps(s, *t)
		case "redis":
			steps = inboxSteps(s, s.redisInboxTarget())
		}
		for i, sub := range inboxSubs(st.name) {
			if ctx.Err() != nil || !s.inboxSubSelected(sub) {
				continue
			}
			t0 := time.Now()
			if err := steps[i](ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", sub, err))
				s.fail("inbox %s: %v", sub, err)
			}
			s.logf("   inbox %s took %s", sub, time.Since(t0).Round(100*time.Millisecond))
		}
	}
	return errors.Join(errs...)
}

// inboxComparisons are the inbox rows of the targets table (issue 31):
// per record, the consumer with the inbox at least 0.77× the same
// consumer without it (a cost of at most 1.3×), and close to 1× with 100
// records per transaction (0.9×); the group's rates have no target.
func inboxComparisons() []comparison {
	var cs []comparison
	for _, t := range inboxStores {
		rec := func(batch int, kind string) string { return fmt.Sprintf("inbox.%s.rec%d.%s", t.key, batch, kind) }
		cs = append(cs,
			comparison{group: t.title + " inbox, 1 record/tx, 1 consumer from kfake: with the inbox vs the same effect without it (cost ≤ 1.3×)", ours: rec(1, "inbox"), other: rec(1, "plain"), target: 0.77},
			comparison{group: t.title + " inbox, 1 record/tx, 1 consumer from kfake: the inbox with IDs only (no key order, no offsets) vs the same effect without it", ours: rec(1, "id"), other: rec(1, "plain")},
			comparison{group: t.title + " inbox, 1 record/tx, 1 consumer from kfake: the store's combined calls (KeyRecorder, Finisher) vs a round trip per Store method", ours: rec(1, "inbox"), other: rec(1, "split")},
			comparison{group: fmt.Sprintf("%s inbox, %d records/tx, 1 consumer from kfake: with the inbox vs the same effects without it", t.title, inboxBatch), ours: rec(inboxBatch, "inbox"), other: rec(inboxBatch, "plain"), target: 0.9},
		)
		if t.name == "postgres" {
			cs = append(cs,
				comparison{group: fmt.Sprintf("%s inbox, kafkainbox consumer group of %d on %d partitions, from Run", t.title, inboxGroupSize, inboxPartitions), ours: fmt.Sprintf("inbox.%s.group%d", t.key, inboxGroupSize)},
				comparison{group: fmt.Sprintf("%s inbox, kafkainbox consumer group of %d vs 1 on %d partitions, first record to last commit", t.title, inboxGroupSize, inboxPartitions), ours: fmt.Sprintf("inbox.%s.group%d.steady", t.key, inboxGroupSize), other: fmt.Sprintf("inbox.%s.group1.steady", t.key)},
			)
		}
	}
	return cs
}
