package inboxconsumer

import (
	"context"
	"database/sql"
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

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/backends/redis/redisinbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

// Modes of the consumer (-mode).
const (
	// ModeInbox applies each record through the inbox (kafkainbox's
	// Consumer over a pginbox Store): the effect, the entry's ID, its
	// key's sequence number and the partition's next offset in one
	// transaction; a partition resumes from the offset stored there when
	// assigned (kafkainbox also commits offsets to Kafka, for lag
	// monitoring only: they are never read back).
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
	fs.StringVar(&c.store, "store", "", "the consumer's database (effects, inbox records, offsets): postgres://..., mysql://USER@HOST:PORT/DATABASE or redis://HOST:PORT/DB?prefix={tag}")
	fs.StringVar(&c.schema, "schema", "", "PostgreSQL schema of the effect and inbox tables (see Setup); unused with mysql://")
	fs.StringVar(&c.mode, "mode", ModeInbox, "inbox (exactly once) or plain (the negative control: at least once)")
	fs.IntVar(&c.batch, "batch", 50, "inbox mode: records of one partition per transaction, at most")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("inboxconsumer: %w", err)
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("inboxconsumer: unexpected arguments %q: every setting is a flag", fs.Args())
	case c.brokers == "" || c.topic == "" || c.group == "":
		return c, errors.New("inboxconsumer: -kafka-brokers, -topic and -group are required")
	case c.store == "" || (c.schema == "" && strings.HasPrefix(c.store, "postgres")):
		return c, errors.New("inboxconsumer: -store is required, and -schema with a postgres:// store")
	case c.mode != ModeInbox && c.mode != ModePlain:
		return c, fmt.Errorf("inboxconsumer: -mode %q: use %s or %s", c.mode, ModeInbox, ModePlain)
	case c.batch < 1:
		return c, fmt.Errorf("inboxconsumer: -batch %d: give 1 or more", c.batch)
	}
	return c, nil
}

// consumer is one run of the process.
type consumer struct {
	cfg config
	log *slog.Logger
	pid int

	// plain mode's client, its transaction of one record's effect, and
	// its counts (inbox mode counts in kafkainbox).
	cl                        *kgo.Client
	applyPlain                func(ctx context.Context, m inbox.Message) error
	records, applied, retries atomic.Int64
}

// Main runs the consumer with the command-line arguments args (without
// the subcommand's name) until ctx ends, and then returns nil after
// leaving the group; it returns an error for bad flags, a database or
// broker it cannot reach at start, or a record without an outbox ID.
// Failed transactions are retried (with a backoff) until they commit:
// a record is never skipped. Inbox mode is kafkainbox's Consumer over a
// pginbox or mysqlinbox Store; plain mode is a kgo consumer of its own
// (below).
func Main(ctx context.Context, args []string) error {
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	c := &consumer{cfg: cfg, pid: os.Getpid(),
		log: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("consumer", cfg.instance, "mode", cfg.mode)}
	if isMySQL(cfg.store) {
		return c.mainMySQL(ctx)
	}
	if isRedis(cfg.store) {
		return c.mainRedis(ctx)
	}
	pc, err := pgxpool.ParseConfig(cfg.store)
	if err != nil {
		return fmt.Errorf("inboxconsumer: -store: %v", err)
	}
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("inboxconsumer: -store: %v", err)
	}
	defer pool.Close()
	if cfg.mode == ModeInbox {
		st, err := pginbox.New(pool, inboxOptions(cfg.schema))
		if err != nil {
			return err
		}
		return runInbox(ctx, c, inbox.Store[pgx.Tx](st), func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
			return insertEffect(ctx, tx, cfg.schema, m.ID, m.Key, m.Seq, c.pid)
		})
	}
	c.applyPlain = func(ctx context.Context, m inbox.Message) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return insertEffect(ctx, tx, cfg.schema, m.ID, m.Key, m.Seq, c.pid)
		})
	}
	return c.runPlain(ctx)
}

// mainMySQL is Main with the effects and the inbox in MySQL or MariaDB.
func (c *consumer) mainMySQL(ctx context.Context) error {
	db, err := openMySQL(c.cfg.store)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	if c.cfg.mode == ModeInbox {
		st, err := mysqlinbox.New(db, mysqlInboxOptions)
		if err != nil {
			return err
		}
		defer st.Close()
		return runInbox(ctx, c, inbox.Store[*sql.Tx](st), func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			return insertEffectMySQL(ctx, tx, m.ID, m.Key, m.Seq, c.pid)
		})
	}
	c.applyPlain = func(ctx context.Context, m inbox.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := insertEffectMySQL(ctx, tx, m.ID, m.Key, m.Seq, c.pid); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	return c.runPlain(ctx)
}

// mainRedis is Main with the effects and the inbox in Redis: the effect
// is queued in the inbox's MULTI (redisinbox.Tx.Pipe).
func (c *consumer) mainRedis(ctx context.Context) error {
	client, prefix, err := openRedis(c.cfg.store)
	if err != nil {
		return err
	}
	defer client.Close()
	if c.cfg.mode == ModeInbox {
		st, err := redisinbox.New(client, redisinbox.Options{Prefix: prefix})
		if err != nil {
			return err
		}
		return runInbox(ctx, c, inbox.Store[*redisinbox.Tx](st), func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
			return insertEffectRedis(ctx, tx, prefix, m.ID, m.Key, m.Seq, c.pid)
		})
	}
	c.applyPlain = func(ctx context.Context, m inbox.Message) error {
		return client.RPush(ctx, redisEffectsKey(prefix), fmt.Sprintf("%s\t%s\t%d\t%d", m.ID, m.Key, m.Seq, c.pid)).Err()
	}
	return c.runPlain(ctx)
}

func (c *consumer) summary(start time.Time, counts string) {
	c.log.Info(fmt.Sprintf("inbox-consumer %s: summary after %v: %s", c.cfg.instance, time.Since(start).Round(time.Millisecond), counts))
}

// runInbox runs kafkainbox's Consumer over st with insert as the
// handler: the effect, the inbox record, the key's sequence number and
// the partition's next offset in one transaction, offsets resumed from
// the store on assignment.
func runInbox[Tx any](ctx context.Context, c *consumer, st inbox.Store[Tx], insert inbox.Handler[Tx]) error {
	start := time.Now()
	ib, err := inbox.New(st, inbox.Options{Logger: c.log, MaxAttempts: 20})
	if err != nil {
		return err
	}
	kc, err := kafkainbox.NewConsumer(ib, insert, kafkainbox.Options{
		Group: c.cfg.group, Topics: []string{c.cfg.topic}, MaxBatch: c.cfg.batch,
		MaxRetryBackoff: time.Second, Logger: c.log,
	}, c.groupOpts()...)
	if err != nil {
		return err
	}
	err = kc.Run(ctx)
	s := kc.Stats()
	c.summary(start, fmt.Sprintf("applied %d, duplicates skipped %d, gaps %d, transactions %d, failed attempts %d, yielded %d",
		s.Applied, s.Duplicates, s.Gaps, s.Batches, s.Failures, s.Yielded))
	return err
}

// runPlain runs the negative control's consumer: applyPlain per record.
func (c *consumer) runPlain(ctx context.Context) error {
	start := time.Now()
	var err error
	if c.cl, err = kgo.NewClient(c.plainOpts()...); err != nil {
		return fmt.Errorf("inboxconsumer: %w", err)
	}
	err = c.loop(ctx)
	c.cl.Close() // leaves the group after committing the marked offsets
	c.summary(start, fmt.Sprintf("records %d, applied %d, transactions retried %d", c.records.Load(), c.applied.Load(), c.retries.Load()))
	return err
}

// groupOpts are the group member's options of both modes: a 6 s session
// (kfake's minimum), and static membership with -instance.
func (c *consumer) groupOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(c.cfg.brokers, ",")...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(time.Second),
		kgo.RebalanceTimeout(10 * time.Second),
		// Joins, assignments, revocations and fencing, for the log.
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
	}
	if c.cfg.instance != "" {
		opts = append(opts, kgo.InstanceID(c.cfg.instance))
	}
	return opts
}

// plainOpts: the group's offsets in Kafka, each record's marked after its
// transaction committed and committed every 5 s (kgo's default).
func (c *consumer) plainOpts() []kgo.Opt {
	return append(c.groupOpts(),
		kgo.ConsumerGroup(c.cfg.group),
		kgo.ConsumeTopics(c.cfg.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
	)
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

// partition applies one partition's fetched records, in order, each in a
// transaction of its own, marking its offset after the commit.
func (c *consumer) partition(ctx context.Context, recs []*kgo.Record) error {
	c.records.Add(int64(len(recs)))
	for _, r := range recs {
		if err := c.plain(ctx, r); err != nil {
			return err
		}
		c.cl.MarkCommitRecords(r)
	}
	return nil
}

// plain applies one record in a transaction of its own, without the
// inbox, again and again until it commits (or ctx ends).
func (c *consumer) plain(ctx context.Context, r *kgo.Record) error {
	m, err := kafkainbox.Message(r)
	if err != nil {
		return err
	}
	return c.untilDone(ctx, func() error {
		err := c.applyPlain(ctx, m)
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
