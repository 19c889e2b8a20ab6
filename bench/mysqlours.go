package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// Our MySQL backend in the harness: the target the shared workloads (W4)
// run on, and the MySQL rows of W1 and W2.

// mysqlTarget is our MySQL backend as the workloads see it; set, when not
// nil, changes the Options of every instance.
func (s *Suite) mysqlTarget(c *mysqlConn, set func(*mysqloutbox.Options)) target {
	return target{name: "mysql", key: "my", title: "MySQL", server: "mariadbd", open: func(ctx context.Context, partitions int) (*instance, error) {
		return c.openOurs(ctx, c.db, c.dsn, partitions, set)
	}}
}

// openOurs makes a fresh outbox of partitions partitions on db (whose DSN
// is dsn) and two backends on it, as an appending service and a relay
// process have: the appends go through a backend on db, in transactions
// of db (so they use its prepared statements); the relay's store is a
// backend on a pool of its own (8 connections).
func (c *mysqlConn) openOurs(ctx context.Context, db *sql.DB, dsn string, partitions int, set func(*mysqloutbox.Options)) (*instance, error) {
	opts := mysqloutbox.Options{Table: "ob" + strconv.FormatInt(instanceSeq.Add(1), 10), Partitions: partitions, Logger: oursLogger()}
	if set != nil {
		set(&opts)
	}
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		return nil, err
	}
	app, err := mysqloutbox.New(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	relayDB, err := sql.Open("mysql", dsn)
	if err != nil {
		app.Close()
		return nil, err
	}
	relayDB.SetMaxOpenConns(8)
	relayDB.SetMaxIdleConns(8)
	b, err := mysqloutbox.New(ctx, relayDB, opts)
	if err != nil {
		app.Close()
		relayDB.Close()
		return nil, err
	}
	return &instance{
		store: b,
		append: func(ctx context.Context, entries []outbox.Entry) error {
			return inTx(ctx, db, func(tx *sql.Tx) error { return app.AppendInTx(ctx, tx, entries...) })
		},
		analyze: func(ctx context.Context) error {
			return c.analyze(ctx, db, "`"+opts.Table+"`", "`"+opts.Table+"_lease`")
		},
		close: func() {
			b.Close()
			app.Close()
			relayDB.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, suffix := range []string{"", "_lease", "_archive", "_meta", "_hold", "_import", "_member", "_keyseq", "_pause_topic", "_pause_part", "_migrations"} {
				if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+opts.Table+suffix+"`"); err != nil {
					fmt.Fprintf(os.Stderr, "cleanup %s: %v\n", opts.Table, err)
				}
			}
		},
	}, nil
}

// mysqlStep is one of our MySQL workloads.
type mysqlStep struct {
	name string // as mysqlSubs names it
	fn   func(ctx context.Context) error
}

// mysqlOurs returns our MySQL workloads.
func (s *Suite) mysqlOurs(c *mysqlConn) []mysqlStep {
	t := s.mysqlTarget(c, nil)
	return []mysqlStep{
		{"W1+W2 append and drain", func(ctx context.Context) error { return s.mysqlW1W2(ctx, t) }},
		{"W4 backlog", func(ctx context.Context) error { return s.w4(ctx, t) }},
		{"W3 latency", func(ctx context.Context) error { return s.mysqlLatency(ctx, c) }},
	}
}

// mysqlW1W2: append 1/tx and 100/tx to an outbox of 8 partitions, then
// drain the 100/tx backlog with one relay into the no-op sink.
func (s *Suite) mysqlW1W2(ctx context.Context, t target) error {
	n, n1 := s.cfg.N, s.cfg.N1
	msgs := newMessages(n, 6)
	app1, app100, noop := s.sr("my.app1"), s.sr("my.app100"), s.sr("my.noop")
	for run := range s.thisRun() {
		in, err := t.open(ctx, mysqlPartitions)
		if err != nil {
			return err
		}
		el, err := in.fill(ctx, msgs.head(n1), 1)
		if err == nil {
			err = in.expectPending(ctx, n1)
		}
		in.close()
		if err != nil {
			return fmt.Errorf("append 1/tx: %w", err)
		}
		app1.add(rate(n1, el), nil)

		in, err = t.open(ctx, mysqlPartitions)
		if err != nil {
			return err
		}
		el, err = in.fill(ctx, msgs, 100)
		if err == nil {
			err = in.expectPending(ctx, n)
		}
		if err != nil {
			in.close()
			return fmt.Errorf("append 100/tx: %w", err)
		}
		app100.add(rate(n, el), nil)

		tr := newTracker(n)
		c0 := readCPU(t.server)
		el, err = s.drainRelay(ctx, in.store, countSink{tr}, tr, 1, nil)
		if self, srv, ok := perEntry(c0, readCPU(t.server), n); ok && err == nil {
			s.logf("mysql drain CPU per entry: relay process %v, %s %v, wall %v", self, t.server, srv, el/time.Duration(n))
		}
		cn := tr.counts_()
		if err == nil {
			err = cn.check(false)
		}
		if err == nil {
			err = in.expectPending(ctx, 0)
		}
		in.close()
		if err != nil {
			s.fail("outbox/mysql drain run %d: %v", run+1, err)
		}
		noop.add(rate(n, el), &cn)
	}
	w1 := fmt.Sprintf("MySQL append, 1 entry/tx, %d callers", Callers)
	s.record("ours.my.append1", w1, "outbox/mysql AppendInTx", "entries/s", true, app1, fmt.Sprintf("%d partitions", mysqlPartitions))
	s.record("ours.my.append100", fmt.Sprintf("MySQL append, 100 entries/tx, %d callers", Callers), "outbox/mysql AppendInTx", "entries/s", true, app100, fmt.Sprintf("%d partitions", mysqlPartitions))
	s.record("ours.my.drain.noop", s.drainTitle("MySQL", "no-op sink"), "outbox/mysql relay", "entries/s", true, noop, fmt.Sprintf("1 relay, %d partitions, BatchSize 500", mysqlPartitions))
	return nil
}
