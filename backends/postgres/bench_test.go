package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// Benchmarks behind docs/postgres.md. They measure throughput against the
// local PostgreSQL; run them alone (the machine is shared):
//
//	go test -run '^$' -bench . -benchtime 3x ./backends/postgres/

const appendCallers = 8

func benchPayload() []byte {
	p := make([]byte, 256)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}

// BenchmarkAppend appends with 8 concurrent callers, each transaction
// holding 1 or 100 entries: AppendInTx (one multi-row INSERT from arrays)
// against a raw COPY into the same table (no ON CONFLICT, no NOTIFY: the
// upper bound COPY could reach). b.N is the number of transactions.
func BenchmarkAppend(b *testing.B) {
	for _, per := range []int{1, 100} {
		for _, how := range []string{"AppendInTx", "COPY"} {
			b.Run(fmt.Sprintf("%s/%d-per-tx", how, per), func(b *testing.B) {
				be, p := newBackend(b, extended, pgoutbox.Options{})
				table := pgx.Identifier{be.Options().Schema, "outbox"}
				payload := benchPayload()
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for w := range appendCallers {
					wg.Go(func() {
						ctx := context.Background()
						for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
							es := make([]outbox.Entry, per)
							rows := make([][]any, per)
							for i := range es {
								id := fmt.Sprintf("w%d-%d-%d", w, n, i)
								key := fmt.Sprint("agg-", (int(n)*per+i)%1000)
								es[i] = outbox.Entry{ID: id, Topic: "bench", Key: key, Payload: payload}
								now := time.Now()
								rows[i] = []any{id, int32(0), "bench", []byte(key), payload, now, now}
							}
							err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
								if how == "COPY" {
									_, err := tx.CopyFrom(ctx, table, []string{"id", "partition", "topic", "key", "payload", "created_at", "next_at"}, pgx.CopyFromRows(rows))
									return err
								}
								return be.AppendInTx(ctx, tx, es...)
							})
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "entries/s")
			})
		}
	}
}

// BenchmarkDrain100k drains a backlog of 100,000 entries with one relay
// loop (AcquireLease, FindPendingBatch(500), MarkSent, into a no-op sink)
// for three claim designs
//
//   - partition-lease: the chosen design (the lease row is the claim, the
//     batch is read without writing, the finish is one fenced DELETE);
//   - partition-lease+rowlock: the same with FOR UPDATE SKIP LOCKED in the
//     claim query;
//   - inflight-update: the seeds' design, an UPDATE marking each claimed row
//     in-flight (owner, version + 1, expiry) under SKIP LOCKED, then a DELETE
//     fenced per row by owner and version;
//
// and partition-lease+topic-paused, the chosen design while a topic (with
// no entries) is paused: the cost of a pause.
func BenchmarkDrain100k(b *testing.B) {
	const backlog, batch = 100_000, 500
	for _, design := range []string{"partition-lease", "partition-lease+rowlock", "inflight-update", "partition-lease+topic-paused"} {
		b.Run(design, func(b *testing.B) {
			be, p := newBackend(b, extended, pgoutbox.Options{})
			schema := be.Options().Schema
			ctx := context.Background()
			table := pgx.Identifier{schema, "outbox"}.Sanitize()
			drain := func() (int, error) { return drainLease(ctx, be, batch) }
			switch design {
			case "partition-lease+rowlock":
				locking, err := pgoutbox.NewRowLocking(ctx, p, be.Options())
				if err != nil {
					b.Fatal(err)
				}
				drain = func() (int, error) { return drainLease(ctx, locking, batch) }
			case "partition-lease+topic-paused":
				// The cost of a pause: another topic (with no entries) is
				// paused, so every fetch computes the partition's paused
				// keys (docs/postgres.md, "Operators").
				if err := be.PauseTopic(ctx, "paused"); err != nil {
					b.Fatal(err)
				}
			case "inflight-update":
				table = pgx.Identifier{schema, "inflight"}.Sanitize()
				if err := createInflight(ctx, p, table); err != nil {
					b.Fatal(err)
				}
				drain = func() (int, error) { return drainInflight(ctx, be, p, table, batch) }
			}
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				if err := load(ctx, p, table, backlog); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				n, err := drain()
				total += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if n != backlog {
					b.Fatalf("drained %d entries, want %d", n, backlog)
				}
				b.StopTimer()
				if _, err := p.Exec(ctx, "VACUUM "+table); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(backlog)*float64(b.N)/total.Seconds(), "rows/s")
		})
	}
}

func drainLease(ctx context.Context, be *pgoutbox.Backend, batch int) (int, error) {
	n := 0
	for {
		l, err := be.AcquireLease(ctx, 0, "bench", time.Minute)
		if err != nil {
			return n, err
		}
		es, err := be.FindPendingBatch(ctx, l, batch)
		if err != nil {
			return n, err
		}
		if len(es) == 0 {
			return n, nil
		}
		ids := make([]string, len(es))
		for i, e := range es {
			ids[i] = e.ID
		}
		if err := be.MarkSent(ctx, l, ids); err != nil {
			return n, err
		}
		n += len(es)
	}
}

func createInflight(ctx context.Context, p *pgxpool.Pool, table string) error {
	_, err := p.Exec(ctx, `CREATE TABLE `+table+` (
		seq bigint GENERATED ALWAYS AS IDENTITY, id text PRIMARY KEY, partition integer NOT NULL,
		topic text NOT NULL, key bytea NOT NULL DEFAULT '', payload bytea, headers bytea,
		not_before timestamptz, created_at timestamptz NOT NULL, next_at timestamptz NOT NULL,
		attempts integer NOT NULL DEFAULT 0, state text NOT NULL DEFAULT 'pending',
		last_error text NOT NULL DEFAULT '', lease_owner text, lease_version bigint NOT NULL DEFAULT 0,
		lease_expires timestamptz);
	CREATE INDEX ON `+table+` (partition, next_at, seq) WHERE state = 'pending';
	CREATE INDEX ON `+table+` (partition, lease_expires) WHERE state = 'inflight';
	CREATE INDEX ON `+table+` (partition, key, seq) WHERE attempts > 0 AND state <> 'parked'`)
	return err
}

func drainInflight(ctx context.Context, be *pgoutbox.Backend, p *pgxpool.Pool, table string, batch int) (int, error) {
	claim := `WITH c AS (
		SELECT o.id FROM ` + table + ` AS o
		WHERE o.partition = $1 AND o.state = 'pending' AND o.next_at <= now()
		  AND (o.key = ''::bytea OR NOT EXISTS (SELECT 1 FROM ` + table + ` AS h
		       WHERE h.partition = o.partition AND h.key = o.key AND h.seq < o.seq
		         AND h.attempts > 0 AND h.state <> 'parked'))
		ORDER BY o.next_at, o.seq LIMIT $3
		FOR UPDATE SKIP LOCKED)
	UPDATE ` + table + ` AS o
	SET state = 'inflight', lease_owner = $2, lease_version = o.lease_version + 1,
	    lease_expires = now() + interval '30 seconds'
	FROM c WHERE o.id = c.id
	RETURNING o.id, o.lease_version, o.topic, o.key, o.payload, o.headers, o.attempts, o.created_at`
	sent := `DELETE FROM ` + table + ` AS o USING unnest($1::text[], $2::bigint[]) AS f(id, v)
		WHERE o.id = f.id AND o.lease_owner = $3 AND o.lease_version = f.v AND o.state = 'inflight'`
	n := 0
	for {
		l, err := be.AcquireLease(ctx, 0, "bench", time.Minute)
		if err != nil {
			return n, err
		}
		rows, err := p.Query(ctx, claim, l.Partition, l.Owner, batch)
		if err != nil {
			return n, err
		}
		var ids []string
		var versions []int64
		for rows.Next() {
			var e outbox.Entry
			var v int64
			var key []byte
			if err := rows.Scan(&e.ID, &v, &e.Topic, &key, &e.Payload, new([]byte), &e.Attempts, &e.CreatedAt); err != nil {
				rows.Close()
				return n, err
			}
			ids, versions = append(ids, e.ID), append(versions, v)
		}
		if err := rows.Err(); err != nil {
			return n, err
		}
		if len(ids) == 0 {
			return n, nil
		}
		if _, err := p.Exec(ctx, sent, ids, versions, l.Owner); err != nil {
			return n, err
		}
		n += len(ids)
	}
}

// BenchmarkLeaseContention measures what standby relays cost the holder of
// a lease (docs/postgres.md, "Lease contention"). The holder runs fenced
// writes one after another (MarkSent and MarkFailed of an ID that is not
// there, alternately: each reads the lease row FOR SHARE and changes
// nothing) while 20 standby owners call AcquireLease on the same partition
// in a loop, each call failing with ErrLeaseHeld. "update" is the current
// AcquireLease statement, "upsert" the one before migration 004
// (INSERT ... ON CONFLICT DO UPDATE ... WHERE), "alone" the holder
// without standbys, for reference. b.N counts the holder's
// writes and ns/op is their mean latency. Also reported: the holder's p99
// write latency, the standbys' acquires per second, and lock waits sampled
// every millisecond from pg_stat_activity: the share of samples in which a
// connection of the benchmark waited on a heavyweight lock
// (wait_event_type = 'Lock') and the mean number of such connections.
//
//	go test -run '^$' -bench LeaseContention -benchtime 3000x ./backends/postgres/
func BenchmarkLeaseContention(b *testing.B) {
	for _, variant := range []string{"alone", "upsert", "update"} {
		standbys := 20
		if variant == "alone" {
			standbys = 0
		}
		b.Run(variant, func(b *testing.B) {
			ctx := context.Background()
			base := pool(b, extended)
			schema := freshSchema(b, base)
			if err := pgoutbox.Migrate(ctx, base, pgoutbox.Options{Schema: schema, Partitions: 1}); err != nil {
				b.Fatal(err)
			}
			// A pool of its own, tagged so the sampler counts only its
			// connections.
			cfg := base.Config().Copy()
			app := "pgoutbox-contention-" + schema[len("pgoutbox_test_"):]
			cfg.ConnConfig.RuntimeParams["application_name"] = app
			cfg.MaxConns = int32(standbys) + 2
			p, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			be, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: schema})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			if variant == "upsert" {
				be.SetAcquireQuery(upsertAcquireSQL)
			}
			lease, err := be.AcquireLease(ctx, 0, "holder", time.Hour)
			if err != nil {
				b.Fatal(err)
			}

			stop := make(chan struct{})
			var acquires atomic.Int64
			var wg sync.WaitGroup
			for i := range standbys {
				wg.Go(func() {
					owner := fmt.Sprint("standby-", i)
					for {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := be.AcquireLease(ctx, 0, owner, time.Minute); !errors.Is(err, outbox.ErrLeaseHeld) {
							b.Errorf("standby AcquireLease: %v, want ErrLeaseHeld", err)
							return
						}
						acquires.Add(1)
					}
				})
			}
			var samples, waited, waiters int64
			wg.Go(func() {
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					var n int64
					if err := base.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&n); err != nil {
						b.Errorf("sampling pg_stat_activity: %v", err)
						return
					}
					samples++
					waiters += n
					if n > 0 {
						waited++
					}
				}
			})

			ids := []string{"not-there"}
			failures := []outbox.Failure{{ID: "not-there", Error: "x"}}
			lat := make([]time.Duration, 0, b.N)
			start := time.Now()
			acquired := acquires.Load()
			i := 0
			for b.Loop() {
				t0 := time.Now()
				if i%2 == 0 {
					err = be.MarkSent(ctx, lease, ids)
				} else {
					err = be.MarkFailed(ctx, lease, failures)
				}
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				i++
			}
			elapsed := time.Since(start)
			acquired = acquires.Load() - acquired
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(acquired)/elapsed.Seconds(), "acquires/s")
			if samples > 0 {
				b.ReportMetric(100*float64(waited)/float64(samples), "%lockwait")
				b.ReportMetric(float64(waiters)/float64(samples), "waiters")
			}
		})
	}
}

// loadSpread inserts n entries straight into table, spread round-robin over
// partitions, as an operator's view would meet them: 1% parked, 10%
// scheduled an hour ahead, 2% failing (attempts 1) and due, the rest due
// (256-byte payloads, keys from 1,000 aggregates); then VACUUM ANALYZE, as
// autovacuum would have run on a table this size.
func loadSpread(ctx context.Context, p *pgxpool.Pool, table string, n, partitions int) error {
	_, err := p.Exec(ctx, `INSERT INTO `+table+` (id, partition, topic, key, payload, created_at, next_at, attempts, state, last_error)
		SELECT 'e' || lpad(i::text, 8, '0'), i % $2::int, 'bench', convert_to('agg-' || (i % 1000), 'UTF8'),
		       decode(repeat('ab', 256), 'hex'), now() - interval '1 minute',
		       CASE WHEN i % 10 = 1 THEN now() + interval '1 hour' ELSE now() - interval '1 minute' END,
		       CASE WHEN i % 100 = 0 OR i % 50 = 3 THEN 1 ELSE 0 END,
		       CASE WHEN i % 100 = 0 THEN 'parked' ELSE 'pending' END,
		       CASE WHEN i % 100 = 0 OR i % 50 = 3 THEN 'boom' ELSE '' END
		FROM generate_series(1, $1::int) AS i`, n, partitions)
	if err == nil {
		_, err = p.Exec(ctx, "VACUUM ANALYZE "+table)
	}
	return err
}

// BenchmarkPartitionStats times PartitionStats and Stats on an outbox of
// 1,000,000 entries over 16 partitions (loadSpread), 16 leases held. The
// load takes about half a minute.
func BenchmarkPartitionStats(b *testing.B) {
	const rows, partitions = 1_000_000, 16
	be, p := newBackend(b, extended, pgoutbox.Options{Partitions: partitions})
	ctx := context.Background()
	if err := loadSpread(ctx, p, pgx.Identifier{be.Options().Schema, "outbox"}.Sanitize(), rows, partitions); err != nil {
		b.Fatal(err)
	}
	for i := range partitions {
		if _, err := be.AcquireLease(ctx, i, "bench", time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("PartitionStats", func(b *testing.B) {
		for b.Loop() {
			s, err := be.PartitionStats(ctx)
			if err != nil || len(s) != partitions || s[0].Pending == 0 || s[0].Lease.Owner != "bench" {
				b.Fatalf("PartitionStats: %+v, %v", s, err)
			}
		}
	})
	b.Run("Stats", func(b *testing.B) {
		for b.Loop() {
			if s, err := be.Stats(ctx); err != nil || s.Pending+s.Parked != rows {
				b.Fatalf("Stats: %+v, %v", s, err)
			}
		}
	})
}

// BenchmarkExportBatch measures one ExportBatch(500) of a partition
// holding 100,000 entries (read-only, so every iteration reads the same
// first 500), without and with an index on (partition, seq), which the
// migrations do not create and Seal builds (see docs/postgres.md, "Moving
// an outbox").
func BenchmarkExportBatch(b *testing.B) {
	const backlog, batch = 100_000, 500
	for _, index := range []bool{false, true} {
		b.Run(fmt.Sprintf("seq-index=%v", index), func(b *testing.B) {
			be, p := newBackend(b, extended, pgoutbox.Options{})
			ctx := context.Background()
			table := pgx.Identifier{be.Options().Schema, "outbox"}.Sanitize()
			if err := load(ctx, p, table, backlog); err != nil {
				b.Fatal(err)
			}
			if index {
				if _, err := p.Exec(ctx, "CREATE INDEX ON "+table+" (partition, seq)"); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := p.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
				b.Fatal(err)
			}
			l, err := be.AcquireLease(ctx, 0, "bench", time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				es, err := be.ExportBatch(ctx, l, batch)
				if err != nil || len(es) != batch {
					b.Fatalf("ExportBatch: %d, %v", len(es), err)
				}
			}
		})
	}
}
