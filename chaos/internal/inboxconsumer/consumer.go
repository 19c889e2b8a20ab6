package inboxconsumer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// Modes of the consumer (-mode).
const (
	// ModeInbox applies each record through the inbox: the effect, the
	// entry's ID, its key's sequence number and the partition's next
	// offset in one transaction; offsets are read back from PostgreSQL on
	// assignment and never committed to Kafka.
	ModeInbox = "inbox"
	// ModePlain is the negative control: one transaction per record
	// holding only the effect, the record's offset marked after the
	// commit and committed to Kafka by the client every AutoCommitInterval
	// (5 s): at least once, so a kill repeats what was applied since the
	// last offset commit.
	ModePlain = "plain"
)

// config is what the flags say.
type config struct {
	brokers  string
	topic    string
	group    string
	instance string
	store    string
	schema   string
	mode     string
	batch    int
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("inbox-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.brokers, "kafka-brokers", "", "Kafka brokers, comma-separated host:port")
	fs.StringVar(&c.topic, "topic", "", "topic to consume")
	fs.StringVar(&c.group, "group", "", "consumer group")
	fs.StringVar(&c.instance, "instance", "", "static group membership instance ID (a restarted consumer with the same ID takes its predecessor's partitions at once); empty: a dynamic member")
	fs.StringVar(&c.store, "store", "", "PostgreSQL URL of the consumer's database (effects, inbox records, offsets)")
	fs.StringVar(&c.schema, "schema", "", "schema of the effect and inbox tables (see Setup)")
	fs.StringVar(&c.mode, "mode", ModeInbox, "inbox (exactly once) or plain (the negative control: at least once)")
	fs.IntVar(&c.batch, "batch", 50, "inbox mode: records of one partition per transaction, at most")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("inbox-consumer: %w", err)
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("inbox-consumer: unexpected arguments %q: every setting is a flag", fs.Args())
	case c.brokers == "" || c.topic == "" || c.group == "":
		return c, errors.New("inbox-consumer: -kafka-brokers, -topic and -group are required")
	case c.store == "" || c.schema == "":
		return c, errors.New("inbox-consumer: -store and -schema are required")
	case c.mode != ModeInbox && c.mode != ModePlain:
		return c, fmt.Errorf("inbox-consumer: -mode %q: use %s or %s", c.mode, ModeInbox, ModePlain)
	case c.batch < 1:
		return c, fmt.Errorf("inbox-consumer: -batch %d: give 1 or more", c.batch)
	}
	return c, nil
}

// consumer is one run of the process.
type consumer struct {
	cfg  config
	pool *pgxpool.Pool
	cl   *kgo.Client
	log  *slog.Logger
	pid  int

	ib    *inbox.Inbox[pgx.Tx]
	store *pgStore

	records, applied, duplicates, retries atomic.Int64
}

// Main runs the consumer with the command-line arguments args (without
// the subcommand's name) until ctx ends, and then returns nil after
// leaving the group; it returns an error for bad flags, a database or
// broker it cannot reach at start, or a record without an outbox ID.
// Failed transactions are retried (with a backoff) until they commit:
// a record is never skipped.
func Main(ctx context.Context, args []string) error {
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	c := &consumer{cfg: cfg, pid: os.Getpid(),
		log: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("consumer", cfg.instance, "mode", cfg.mode)}
	pc, err := pgxpool.ParseConfig(cfg.store)
	if err != nil {
		return fmt.Errorf("inbox-consumer: -store: %v", err)
	}
	pc.MaxConns = 4
	if c.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return fmt.Errorf("inbox-consumer: -store: %v", err)
	}
	defer c.pool.Close()
	if cfg.mode == ModeInbox {
		c.store = newPGStore(c.pool, cfg.schema)
		if c.ib, err = inbox.New(inbox.Store[pgx.Tx](c.store), inbox.Options{Logger: c.log, MaxAttempts: 20}); err != nil {
			return err
		}
	}
	if c.cl, err = kgo.NewClient(c.kafkaOpts()...); err != nil {
		return fmt.Errorf("inbox-consumer: %w", err)
	}
	start := time.Now()
	err = c.loop(ctx)
	c.cl.Close() // leaves the group; plain mode commits its marks first
	c.log.Info(fmt.Sprintf("inbox-consumer %s: summary after %v: records %d, applied %d, duplicates skipped %d, transactions retried %d",
		cfg.instance, time.Since(start).Round(time.Millisecond), c.records.Load(), c.applied.Load(), c.duplicates.Load(), c.retries.Load()))
	return err
}

func (c *consumer) kafkaOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(c.cfg.brokers, ",")...),
		kgo.ConsumerGroup(c.cfg.group),
		kgo.ConsumeTopics(c.cfg.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(time.Second),
		kgo.RebalanceTimeout(10 * time.Second),
	}
	if c.cfg.instance != "" {
		opts = append(opts, kgo.InstanceID(c.cfg.instance))
	}
	if c.cfg.mode == ModeInbox {
		return append(opts, kgo.DisableAutoCommit(), kgo.AdjustFetchOffsetsFn(c.storedOffsets))
	}
	return append(opts, kgo.AutoCommitMarks())
}

// storedOffsets replaces the offsets the group would start from (Kafka's
// committed ones, never written in inbox mode) with those stored with the
// effects.
func (c *consumer) storedOffsets(ctx context.Context, in map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	for topic, parts := range in {
		stored, err := c.store.Offsets(ctx, c.cfg.group, topic)
		if err != nil {
			return nil, fmt.Errorf("inbox-consumer: reading the stored offsets of %s: %w", topic, err)
		}
		for p := range parts {
			if next, ok := stored[p]; ok {
				parts[p] = kgo.NewOffset().At(next)
			}
		}
		c.log.Info("partitions assigned; resuming from the stored offsets", "topic", topic, "stored", stored)
	}
	return in, nil
}

func (c *consumer) loop(ctx context.Context) error {
	for {
		fs := c.cl.PollRecords(ctx, 500)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			c.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		})
		var err error
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if err == nil && len(p.Records) > 0 {
				err = c.partition(ctx, p.Records)
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// partition applies one partition's fetched records, in order.
func (c *consumer) partition(ctx context.Context, recs []*kgo.Record) error {
	c.records.Add(int64(len(recs)))
	if c.cfg.mode == ModePlain {
		for _, r := range recs {
			if err := c.plain(ctx, r); err != nil {
				return err
			}
			c.cl.MarkCommitRecords(r)
		}
		return nil
	}
	for len(recs) > 0 {
		n := min(len(recs), c.cfg.batch)
		if err := c.inboxBatch(ctx, recs[:n]); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

// inboxBatch applies recs through the inbox, again and again until it
// commits (or ctx ends).
func (c *consumer) inboxBatch(ctx context.Context, recs []*kgo.Record) error {
	msgs := make([]inbox.Message, len(recs))
	for i, r := range recs {
		m, err := c.message(r)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	h := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		return insertEffect(ctx, tx, c.cfg.schema, m.ID, m.Key, m.Seq, c.pid)
	}
	return c.untilDone(ctx, func() error {
		rs, err := c.ib.HandleBatch(ctx, msgs, h)
		for _, r := range rs {
			if r.Outcome == inbox.Applied {
				c.applied.Add(1)
			} else {
				c.duplicates.Add(1)
			}
		}
		return err
	})
}

// plain applies one record in a transaction of its own, without the
// inbox, again and again until it commits (or ctx ends).
func (c *consumer) plain(ctx context.Context, r *kgo.Record) error {
	m, err := c.message(r)
	if err != nil {
		return err
	}
	return c.untilDone(ctx, func() error {
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			return insertEffect(ctx, tx, c.cfg.schema, m.ID, m.Key, m.Seq, c.pid)
		})
		if err == nil {
			c.applied.Add(1)
		}
		return err
	})
}

// untilDone runs fn until it returns nil, with a backoff, logging each
// failure; it returns nil when ctx ends first (the record stays
// unapplied for the next owner of its partition).
func (c *consumer) untilDone(ctx context.Context, fn func() error) error {
	backoff := 10 * time.Millisecond
	for {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		c.retries.Add(1)
		c.log.Warn("transaction failed; running it again", "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// message is what the inbox needs of r: the outbox ID, key and per-key
// sequence number from its headers, and the offset after it.
func (c *consumer) message(r *kgo.Record) (inbox.Message, error) {
	id := kafkasink.EntryID(r)
	if id == "" {
		return inbox.Message{}, fmt.Errorf("inbox-consumer: record %s/%d@%d has no %s header: the relay sets it on every record", r.Topic, r.Partition, r.Offset, kafkasink.DefaultIDHeader)
	}
	m := inbox.Message{ID: id, Key: string(r.Key), Data: r,
		Offset: &inbox.Offset{Group: c.cfg.group, Topic: r.Topic, Partition: r.Partition, Next: r.Offset + 1}}
	if v, ok := kafkasink.Header(r, outbox.HeaderKeySeq); ok {
		seq, err := outbox.ParseKeySeq(v)
		if err != nil {
			return inbox.Message{}, fmt.Errorf("inbox-consumer: record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		m.Seq = seq
	}
	return m, nil
}
