package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
)

const schemaWatermill = "bench_wm"

// wmFlavor is one of Watermill SQL's Postgres table layouts.
type wmFlavor struct {
	name    string
	schema  wsql.SchemaAdapter
	offsets wsql.OffsetsAdapter
}

func wmTable(topic string) string   { return schemaWatermill + `."m_` + topic + `"` }
func wmOffsets(topic string) string { return schemaWatermill + `."o_` + topic + `"` }

func wmFlavors() []wmFlavor {
	return []wmFlavor{
		{
			name:    "default",
			schema:  wsql.DefaultPostgreSQLSchema{GenerateMessagesTableName: wmTable},
			offsets: wsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: wmOffsets},
		},
		{
			name:    "queue",
			schema:  wsql.PostgreSQLQueueSchema{GenerateMessagesTableName: wmTable},
			offsets: wsql.PostgreSQLQueueOffsetsAdapter{GenerateMessagesTableName: wmTable, DeleteOnAck: true},
		},
	}
}

func (s *Suite) resetWatermill(ctx context.Context) error {
	return s.recreateSchema(ctx, schemaWatermill, "")
}

func (s *Suite) wmSubscriber(f wmFlavor) (*wsql.Subscriber, error) {
	return wsql.NewSubscriber(wsql.BeginnerFromPgx(s.pool), wsql.SubscriberConfig{
		SchemaAdapter:    f.schema,
		OffsetsAdapter:   f.offsets,
		PollInterval:     10 * time.Millisecond,
		InitializeSchema: true,
	}, nil)
}

// watermill measures Watermill SQL on the same Postgres: the
// transactional publisher (1 message/tx, 8 callers) and a subscriber
// draining the backlog, for its default and its queue table layouts, and
// its forwarder (the outbox component) draining an enveloped backlog to a
// no-op publisher.
func (s *Suite) watermill(ctx context.Context) error {
	n := s.cfg.N
	msgs := newMessages(n, 4)
	appends := map[string]*series{}
	drains := map[string]*series{}
	fwd := s.sr("wm.fwd")
	for run := range s.thisRun() {
		for _, f := range wmFlavors() {
			if appends[f.name] == nil {
				appends[f.name], drains[f.name] = s.sr("wm.app."+f.name), s.sr("wm.sub."+f.name)
			}
			topic := "t_" + f.name
			if err := s.resetWatermill(ctx); err != nil {
				return err
			}
			sub, err := s.wmSubscriber(f)
			if err != nil {
				return err
			}
			if err := sub.SubscribeInitialize(topic); err != nil {
				return fmt.Errorf("watermill %s: initialize: %w", f.name, err)
			}
			// 1 message per transaction, N1 transactions (timed).
			el, err := s.wmPublish(ctx, f, topic, msgs, s.cfg.N1, 1)
			if err != nil {
				return err
			}
			appends[f.name].add(rate(s.cfg.N1, el), nil)
			// The backlog: N messages, 100 per transaction (not timed).
			if _, err := s.pool.Exec(ctx, "TRUNCATE "+wmTable(topic)); err != nil {
				return err
			}
			if _, err := s.wmPublish(ctx, f, topic, msgs, n, 100); err != nil {
				return err
			}
			if err := s.analyzeSchema(ctx, schemaWatermill); err != nil {
				return fmt.Errorf("watermill: ANALYZE: %w", err)
			}

			tr := newTracker(n)
			subCtx, cancel := context.WithCancel(ctx)
			start := time.Now()
			ch, err := sub.Subscribe(subCtx, topic)
			if err != nil {
				cancel()
				return err
			}
			go func() {
				for m := range ch {
					tr.markPayload(m.Payload)
					m.Ack()
				}
			}()
			werr := tr.wait(ctx, drainTimeout(n))
			el = time.Since(start)
			cancel()
			sub.Close()
			c := tr.counts_()
			if werr != nil {
				s.fail("watermill %s subscriber run %d: %v", f.name, run+1, werr)
			} else if err := c.check(true); err != nil {
				s.fail("watermill %s subscriber run %d: %v", f.name, run+1, err)
			}
			drains[f.name].add(rate(n, el), &c)
		}

		if err := s.wmForwarder(ctx, run, msgs, fwd); err != nil {
			return err
		}
	}
	w1 := fmt.Sprintf("Postgres append, 1 entry/tx, %d callers", Callers)
	for _, f := range wmFlavors() {
		appends[f.name], drains[f.name] = s.sr("wm.app."+f.name), s.sr("wm.sub."+f.name)
		s.record("wm.append."+f.name, w1, "Watermill SQL publisher in tx, "+f.name+" schema", "entries/s", true, appends[f.name], "")
		s.record("wm.sub."+f.name, s.drainTitle("Postgres", "no-op sink"), "Watermill SQL subscriber, "+f.name+" schema", "entries/s", true, drains[f.name], "poll 10ms")
	}
	s.record("wm.forwarder", s.drainTitle("Postgres", "no-op sink"), "Watermill forwarder (default schema)", "entries/s", true, fwd, "to a no-op publisher")
	_, err := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schemaWatermill+" CASCADE")
	return err
}

// wmPublish publishes messages 0..n-1 with the transactional publisher,
// per messages per transaction, 8 callers, and checks the row count.
func (s *Suite) wmPublish(ctx context.Context, f wmFlavor, topic string, msgs *messages, n, per int) (time.Duration, error) {
	el, err := parallel(ctx, Callers, n, per, func(ctx context.Context, lo, hi int) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: f.schema}, nil)
			if err != nil {
				return err
			}
			ms := make([]*message.Message, 0, hi-lo)
			for i := lo; i < hi; i++ {
				m := message.NewMessage(watermill.NewUUID(), msgs.payload[i])
				m.Metadata.Set("key", msgs.keys[i])
				ms = append(ms, m)
			}
			return pub.Publish(topic, ms...)
		})
	})
	if err != nil {
		return 0, fmt.Errorf("watermill %s publish: %w", f.name, err)
	}
	var rows int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+wmTable(topic)).Scan(&rows); err != nil {
		return 0, err
	}
	if rows != n {
		return 0, fmt.Errorf("watermill %s publish: count wrong: %d rows after %d publishes", f.name, rows, n)
	}
	return el, nil
}

// countingPublisher is the forwarder's destination: it counts.
type countingPublisher struct{ tr *tracker }

func (p countingPublisher) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		p.tr.markPayload(m.Payload)
	}
	return nil
}

func (p countingPublisher) Close() error { return nil }

// wmForwarder fills the forwarder topic with n enveloped messages (100 per
// transaction, not timed) and times the forwarder draining it.
func (s *Suite) wmForwarder(ctx context.Context, run int, msgs *messages, sr *series) error {
	n := len(msgs.keys)
	f := wmFlavors()[0]
	const fwdTopic = "fwd"
	if err := s.resetWatermill(ctx); err != nil {
		return err
	}
	sub, err := s.wmSubscriber(f)
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(fwdTopic); err != nil {
		return err
	}
	_, err = parallel(ctx, Callers, n, 100, func(ctx context.Context, lo, hi int) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: f.schema}, nil)
			if err != nil {
				return err
			}
			fp := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: fwdTopic})
			ms := make([]*message.Message, 0, hi-lo)
			for i := lo; i < hi; i++ {
				ms = append(ms, message.NewMessage(watermill.NewUUID(), msgs.payload[i]))
			}
			return fp.Publish("dest", ms...)
		})
	})
	if err != nil {
		return fmt.Errorf("watermill forwarder fill: %w", err)
	}
	if err := s.analyzeSchema(ctx, schemaWatermill); err != nil {
		return fmt.Errorf("watermill forwarder: ANALYZE: %w", err)
	}
	tr := newTracker(n)
	fw, err := forwarder.NewForwarder(sub, countingPublisher{tr}, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: fwdTopic})
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	go func() { _ = fw.Run(fctx) }()
	werr := tr.wait(ctx, drainTimeout(n))
	el := time.Since(start)
	cancel()
	_ = fw.Close()
	c := tr.counts_()
	if werr != nil {
		s.fail("watermill forwarder run %d: %v", run+1, werr)
	} else if err := c.check(true); err != nil {
		s.fail("watermill forwarder run %d: %v", run+1, err)
	}
	sr.add(rate(n, el), &c)
	return nil
}
