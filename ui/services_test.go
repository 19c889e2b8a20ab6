package ui_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/internal/testenv"
	"github.com/outboxrelay/outbox/ui"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// odd are entries whose payloads are hard to show: binary, 1 MiB, unicode.
func odd() []outbox.Entry {
	binary := []byte{0, 1, 2, 0xff, 0xfe, '{', 0x80, '\n', 0x1b, '[', '3', '1', 'm'}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	return []outbox.Entry{
		{ID: "odd-binary", Topic: "odd", Key: "k", Payload: binary, Headers: map[string]string{"ü": "\u202e<b>"}},
		{ID: "odd-big", Topic: "odd", Key: "k", Payload: big},
		{ID: "odd-unicode", Topic: "odd", Key: "ключ", Payload: []byte(`{"name":"Zoë 🚀","rtl":"\u05e9\u05dc\u05d5\u05dd"}`)},
	}
}

// checkOdd parks odd's entries in store (they must have been appended)
// and checks the dashboard shows them, requeues one and cancels one.
func checkOdd(t *testing.T, store outbox.Store) {
	parkAll(t, store, func(e outbox.Entry) string { return "broker says: \x00 nöpe for " + e.ID })
	c := newClient(t, newServer(t, store, ui.Options{StoreName: "test"}))
	c.page()
	var p parkedPage
	c.getJSON("/api/parked?key="+url.QueryEscape("ключ"), &p)
	if len(p.Entries) != 1 || p.Entries[0].ID != "odd-unicode" {
		t.Fatalf("key filter: %+v", p.Entries)
	}
	c.getJSON("/api/parked?topic=odd&error=N%C3%96PE", &p)
	if len(p.Entries) != 3 {
		t.Fatalf("%d odd entries parked, want 3", len(p.Entries))
	}
	for _, e := range odd() {
		var d entryDetail
		c.getJSON("/api/entries/"+url.PathEscape(e.ID), &d)
		raw, err := base64.StdEncoding.DecodeString(d.Payload.Base64)
		if err != nil || !bytes.Equal(raw, e.Payload) || d.Payload.Bytes != len(e.Payload) {
			t.Errorf("%s: the base64 payload does not round-trip (%v)", e.ID, err)
		}
		if d.State != "parked" || d.Key != e.Key || d.Attempts != 1 || !strings.HasSuffix(d.LastError, e.ID) {
			t.Errorf("%s: %+v", e.ID, d.summary)
		}
		switch e.ID {
		case "odd-binary":
			if d.Payload.Text != nil || d.Payload.JSON != nil || !strings.Contains(d.Payload.Hex, "00 01 02 ff fe 7b 80") || d.Headers["ü"] != "\u202e<b>" {
				t.Errorf("binary: text %v json %v hex %q headers %v", d.Payload.Text, d.Payload.JSON, d.Payload.Hex, d.Headers)
			}
		case "odd-big":
			if d.Payload.Text == nil || len(*d.Payload.Text) != 1<<20 || strings.Count(d.Payload.Hex, "\n") != 64<<10/16 {
				t.Errorf("big: text %d bytes, hex %d lines (want the first 64 KiB only: 4096)", len(*d.Payload.Text), strings.Count(d.Payload.Hex, "\n"))
			}
		case "odd-unicode":
			if d.Payload.JSON == nil || !strings.Contains(*d.Payload.JSON, "\"name\": \"Zoë 🚀\"") {
				t.Errorf("unicode: json %v", d.Payload.JSON)
			}
		}
	}
	var r requeueResult
	decode(t, c.post("/api/requeue", map[string]any{"ids": []string{"odd-big"}}), &r)
	if r.Requeued != 1 {
		t.Errorf("requeue: %+v", r)
	}
	var x struct{ Cancelled int }
	decode(t, c.post("/api/cancel", map[string]any{"filter": map[string]string{"key": "ключ"}}), &x)
	if x.Cancelled != 1 {
		t.Errorf("cancelled %d, want 1", x.Cancelled)
	}
	c.getJSON("/api/parked", &p)
	if len(p.Entries) != 1 || p.Entries[0].ID != "odd-binary" {
		t.Errorf("left parked: %+v", p.Entries)
	}
}

func pgStore(t *testing.T, partitions int) (*pgxpool.Pool, *pgoutbox.Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close)
	schema := "ui_test_" + randHex(4)
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping %s: %v", schema, err)
		}
	})
	opts := pgoutbox.Options{Schema: schema, Partitions: partitions}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return pool, b
}

func pgAppend(t testing.TB, pool *pgxpool.Pool, b *pgoutbox.Backend, es []outbox.Entry) {
	ctx := context.Background()
	for len(es) > 0 {
		n := min(len(es), 1000)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AppendInTx(ctx, tx, es[:n]...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		es = es[n:]
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	pool, b := pgStore(t, 4)
	pgAppend(t, pool, b, odd())
	checkOdd(t, b)
}

func TestRedis(t *testing.T) {
	t.Parallel()
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	tag := "uitest-" + randHex(4)
	t.Cleanup(func() {
		keys, _ := client.Keys(context.Background(), "{"+tag+"*").Result()
		if len(keys) > 0 {
			_ = client.Del(context.Background(), keys...).Err()
		}
	})
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: "{" + tag + "}", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Append(ctx, odd()...); err != nil {
		t.Fatal(err)
	}
	checkOdd(t, b)
}

// TestLatency logs how long /api/overview and the first /api/parked page
// take with 10,000 parked entries, on memory and Postgres. It asserts
// nothing about time.
func TestLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: fills two outboxes with 10,000 parked entries")
	}
	measure := func(t *testing.T, store outbox.Store) {
		c := newClient(t, newServer(t, store, ui.Options{}))
		for _, target := range []string{"/api/overview", "/api/parked", "/api/parked?error=timed&topic=payments", "/api/partitions"} {
			c.do("GET", target, nil, nil) // warm up
			const runs = 20
			var total, worst time.Duration
			for range runs {
				start := time.Now()
				w := c.do("GET", target, nil, nil)
				d := time.Since(start)
				if w.Code != 200 {
					t.Fatalf("%s: %d %s", target, w.Code, w.Body)
				}
				total += d
				worst = max(worst, d)
			}
			t.Logf("%-42s mean %8v  max %8v  (10,000 parked, %d runs)", target, (total / runs).Round(time.Microsecond), worst.Round(time.Microsecond), runs)
		}
	}
	t.Run("Memory", func(t *testing.T) {
		measure(t, memoryParked(t, newClock(), 10_000))
	})
	t.Run("Postgres", func(t *testing.T) {
		pool, b := pgStore(t, 4)
		pgAppend(t, pool, b, bulk(10_000))
		if n := parkAll(t, b, bulkError); n != 10_000 {
			t.Fatalf("parked %d", n)
		}
		measure(t, b)
	})
}
