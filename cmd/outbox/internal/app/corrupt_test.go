package app

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// TestCorruptEntryEndToEnd damages one stored entry by hand, between good
// entries of the same key and partition, on each backend: a relay with the
// Kafka sink (kfake in process) delivers the good ones in order and parks
// the damaged one with its reason, logging and counting the park; the
// admin CLI shows it (status, parked, show) and refuses to requeue it.
func TestCorruptEntryEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url, pool := cliPostgres(t)
		schema := cliSchema(t, pool)
		opts := pgoutbox.Options{Schema: schema, Partitions: 2}
		if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
			t.Fatal(err)
		}
		b, err := pgoutbox.New(ctx, pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		corruptEndToEnd(t, b, corruptCase{
			appendFn: func(e ...outbox.Entry) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, e...) })
			},
			corrupt: func(id string) error {
				_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "outbox"}.Sanitize()+` SET headers = '\xdeadbeef00ff'::bytea WHERE id = $1`, id)
				return err
			},
			reason:        "corrupt headers column",
			keepsTopicKey: true,
			flags:         []string{"--store", url, "--schema", schema},
		})
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url, client := cliRedis(t)
		prefix := cliPrefix(t, client)
		b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		corruptEndToEnd(t, b, corruptCase{
			appendFn: func(e ...outbox.Entry) error { return b.Append(ctx, e...) },
			corrupt: func(id string) error {
				// The entry's value with an unknown format version: no
				// build of the backend can read it.
				p := outbox.PartitionOf("k", 2)
				entries := strings.Replace(prefix, "}", ":"+strconv.Itoa(p)+"}", 1) + ":entries"
				v, err := client.HGet(ctx, entries, id).Bytes()
				if err != nil {
					return err
				}
				v[0] = 9
				return client.HSet(ctx, entries, id, v).Err()
			},
			reason: "unknown format version 9",
			flags:  []string{"--store", url, "--prefix", prefix},
		})
	})
}

type corruptCase struct {
	appendFn func(...outbox.Entry) error
	corrupt  func(id string) error
	// reason is part of the reason the park must give.
	reason string
	// keepsTopicKey: the damage leaves the topic and key readable, so the
	// CLI must show them.
	keepsTopicKey bool
	flags         []string
}

func corruptEndToEnd(t *testing.T, store outbox.Store, c corruptCase) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	broker := strings.Join(cluster.ListenAddrs(), ",")

	h := map[string]string{"trace": "t1"}
	entries := []outbox.Entry{
		{ID: "e1", Topic: "orders", Key: "k", Payload: []byte("one"), Headers: h},
		{ID: "e2", Topic: "orders", Key: "k", Payload: []byte("two"), Headers: h},
		{ID: "e3", Topic: "orders", Key: "k", Payload: []byte("three"), Headers: h},
		{ID: "e4", Topic: "orders", Key: "k", Payload: []byte("four")},
	}
	if err := c.appendFn(entries...); err != nil {
		t.Fatal(err)
	}
	if err := c.corrupt("e2"); err != nil {
		t.Fatalf("damaging e2 by hand: %v", err)
	}

	sink, err := kafkasink.Dial(strings.Split(broker, ","), kafkasink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	logs := &parkLog{}
	r, err := outbox.NewRelay(store, sink, outbox.RelayOptions{PollInterval: 100 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cons := newE2EConsumer(t, broker, nil)
	good := []outbox.Entry{entries[0], entries[2], entries[3]}
	cons.pollUntil(ctx, func() bool { return cons.has(good) })
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, rec := range cons.recs {
		if id := kafkasink.EntryID(rec); id == "e2" {
			t.Fatalf("the damaged entry reached Kafka: %q", rec.Value)
		} else if len(order) == 0 || order[len(order)-1] != id {
			order = append(order, id)
		}
	}
	if strings.Join(order, " ") != "e1 e3 e4" {
		t.Fatalf("Kafka holds %v, want e1 e3 e4 in that order", order)
	}
	if st := r.Stats(); st.Parked != 1 || st.Published != 3 {
		t.Fatalf("relay stats %+v, want 3 published and 1 parked", st)
	}
	if n, attrs := logs.parks(); n != 1 || attrs["id"] != "e2" || !strings.Contains(attrs["reason"], c.reason) {
		t.Fatalf("the relay logged %d store parks (first: %v); want one, of e2, with a reason holding %q", n, attrs, c.reason)
	}

	s := statusOf(t, c.flags)
	if s.Total.Parked != 1 || s.Total.Pending != 0 {
		t.Fatalf("status: %+v, want 1 parked, 0 pending", s.Total)
	}
	parked := cliOK(t, append([]string{"parked", "--full-error"}, c.flags...)...)
	if !strings.Contains(parked, "e2") || !strings.Contains(parked, c.reason) {
		t.Fatalf("outbox parked does not show e2 with its reason (%q):\n%s", c.reason, parked)
	}
	show := cliOK(t, append([]string{"show", "e2"}, c.flags...)...)
	if !strings.Contains(show, c.reason) {
		t.Fatalf("outbox show e2 lacks the reason %q:\n%s", c.reason, show)
	}
	if c.keepsTopicKey && (!strings.Contains(show, "orders") || !strings.Contains(show, `"k"`) && !strings.Contains(show, " k\n")) {
		t.Fatalf("outbox show e2 lacks the topic and key that are still readable:\n%s", show)
	}
	rq := runCLI(t, append([]string{"requeue", "e2"}, c.flags...)...)
	if rq.code != 1 || !strings.Contains(rq.stdout, "e2: refused, left parked") || !strings.Contains(rq.stderr, "left parked") {
		t.Fatalf("outbox requeue e2: want exit 1, the refusal and its reason:\n%v", rq)
	}
	if s := statusOf(t, c.flags); s.Total.Parked != 1 {
		t.Fatalf("after the refused requeue: %+v, want e2 still parked", s.Total)
	}
	t.Logf("outbox parked:\n%s\noutbox show e2:\n%s\noutbox requeue e2:\n%v", parked, show, rq)
}

// parkLog keeps the relay's records of parks made by the store.
type parkLog struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *parkLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *parkLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "the store parked an entry") {
		h.mu.Lock()
		h.records = append(h.records, r.Clone())
		h.mu.Unlock()
	}
	return nil
}
func (h *parkLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *parkLog) WithGroup(string) slog.Handler      { return h }

// parks returns how many parks were logged and the attributes of the
// first.
func (h *parkLog) parks() (int, map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	attrs := map[string]string{}
	if len(h.records) > 0 {
		h.records[0].Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	}
	return len(h.records), attrs
}
