package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Watermill SQL's MySQL subscriber on the same server, in mysqlBenchDB:
// its default layout (a messages table and an offsets table per topic)
// and its queue layout (a messages table whose rows are deleted on ack).

func wmMyTable(topic string) string   { return "`wm_m_" + topic + "`" }
func wmMyOffsets(topic string) string { return "`wm_o_" + topic + "`" }

func wmMySQLFlavors() []wmFlavor {
	return []wmFlavor{
		{
			name:    "default",
			schema:  wsql.DefaultMySQLSchema{GenerateMessagesTableName: wmMyTable},
			offsets: wsql.DefaultMySQLOffsetsAdapter{GenerateMessagesOffsetsTableName: wmMyOffsets},
		},
		{
			name:    "queue",
			schema:  wsql.MySQLQueueSchema{GenerateMessagesTableName: wmMyTable},
			offsets: wsql.MySQLQueueOffsetsAdapter{GenerateMessagesTableName: wmMyTable, DeleteOnAck: true},
		},
	}
}

func (c *mysqlConn) wmSubscriber(f wmFlavor) (*wsql.Subscriber, error) {
	return wsql.NewSubscriber(wsql.BeginnerFromStdSQL(c.db), wsql.SubscriberConfig{
		SchemaAdapter:    f.schema,
		OffsetsAdapter:   f.offsets,
		PollInterval:     10 * time.Millisecond,
		InitializeSchema: true,
	}, nil)
}

// watermillMySQL measures Watermill SQL on MySQL, for both layouts: the
// transactional publisher (1 message/tx, 8 callers) and a subscriber
// draining a backlog of N (published 100 per transaction, not timed).
func (s *Suite) watermillMySQL(ctx context.Context, c *mysqlConn) error {
	n := s.cfg.N
	msgs := newMessages(n, 24)
	for run := range s.thisRun() {
		for _, f := range wmMySQLFlavors() {
			app, drain := s.sr("wm.my.app."+f.name), s.sr("wm.my.sub."+f.name)
			topic := "t_" + f.name
			for _, t := range []string{wmMyTable(topic), wmMyOffsets(topic)} {
				if _, err := c.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
					return err
				}
			}
			sub, err := c.wmSubscriber(f)
			if err != nil {
				return err
			}
			if err := sub.SubscribeInitialize(topic); err != nil {
				sub.Close()
				return fmt.Errorf("watermill %s: initialize: %w", f.name, err)
			}
			el, err := c.wmPublish(ctx, f, topic, msgs, s.cfg.N1, 1)
			if err != nil {
				sub.Close()
				return err
			}
			app.add(rate(s.cfg.N1, el), nil)
			if _, err := c.db.ExecContext(ctx, "TRUNCATE TABLE "+wmMyTable(topic)); err != nil {
				sub.Close()
				return err
			}
			if _, err := c.wmPublish(ctx, f, topic, msgs, n, 100); err != nil {
				sub.Close()
				return err
			}
			tables := []string{wmMyTable(topic)}
			if f.name == "default" {
				tables = append(tables, wmMyOffsets(topic))
			}
			if err := c.analyze(ctx, c.db, tables...); err != nil {
				sub.Close()
				return err
			}
			s.mysqlSettle(ctx, c)

			tr := newTracker(n)
			subCtx, cancel := context.WithCancel(ctx)
			start := time.Now()
			ch, err := sub.Subscribe(subCtx, topic)
			if err != nil {
				cancel()
				sub.Close()
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
			cn := tr.counts_()
			if werr != nil {
				s.fail("watermill/mysql %s subscriber run %d: %v", f.name, run+1, werr)
			} else if err := cn.check(true); err != nil {
				s.fail("watermill/mysql %s subscriber run %d: %v", f.name, run+1, err)
			}
			drain.add(rate(n, el), &cn)
			for _, t := range []string{wmMyTable(topic), wmMyOffsets(topic)} {
				if _, err := c.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
					return err
				}
			}
		}
	}
	w1 := fmt.Sprintf("MySQL append, 1 entry/tx, %d callers", Callers)
	for _, f := range wmMySQLFlavors() {
		s.record("wm.my.append."+f.name, w1, "Watermill SQL publisher in tx, "+f.name+" schema", "entries/s", true, s.sr("wm.my.app."+f.name), "")
		s.record("wm.my.sub."+f.name, s.drainTitle("MySQL", "no-op sink"), "Watermill SQL MySQL subscriber, "+f.name+" schema", "entries/s", true, s.sr("wm.my.sub."+f.name), "poll 10ms")
	}
	return nil
}

// wmPublish publishes messages 0..n-1 with the transactional publisher,
// per messages per transaction, 8 callers, and checks the row count.
func (c *mysqlConn) wmPublish(ctx context.Context, f wmFlavor, topic string, msgs *messages, n, per int) (time.Duration, error) {
	el, err := parallel(ctx, Callers, n, per, func(ctx context.Context, lo, hi int) error {
		return inTx(ctx, c.db, func(tx *sql.Tx) error {
			pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: f.schema}, nil)
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
		return 0, fmt.Errorf("watermill/mysql %s publish: %w", f.name, err)
	}
	if err := c.expectRows(ctx, wmMyTable(topic), n); err != nil {
		return 0, fmt.Errorf("watermill/mysql %s publish: %w", f.name, err)
	}
	return el, nil
}
