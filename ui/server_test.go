package ui_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/ui"
)

func TestNewRejects(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Options{})
	for name, tc := range map[string]struct {
		store outbox.Store
		opts  ui.Options
		want  string
	}{
		"NilStore":            {nil, ui.Options{}, "nil"},
		"NoInspector":         {struct{ outbox.Store }{b}, ui.Options{}, "outbox.Inspector"},
		"NegativeInterval":    {b, ui.Options{SampleInterval: -time.Second}, "SampleInterval"},
		"NegativeHistory":     {b, ui.Options{History: -time.Second}, "History"},
		"PasswordWithoutUser": {b, ui.Options{BasicPassword: "x"}, "BasicUser"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ui.New(tc.store, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "ui: ") {
				t.Fatalf("New: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestPageAndAssets(t *testing.T) {
	t.Parallel()
	c := newClient(t, newServer(t, memory.New(memory.Options{}), ui.Options{}))
	w := c.do("GET", "/", nil, nil)
	if w.Code != 200 || !strings.Contains(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(w.Body.String(), "<html") {
		t.Fatalf("GET /: %d %q %.100s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	for h, want := range map[string]string{
		"Content-Security-Policy": "default-src 'self'", "X-Content-Type-Options": "nosniff",
		"Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
	} {
		if got := w.Header().Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	ck := c.cookies["outbox_csrf"]
	if ck == nil || len(ck.Value) < 32 || ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
		t.Fatalf("CSRF cookie %+v: want a random value, readable by script, SameSite=Strict, Path=/", ck)
	}
	first := ck.Value
	c.page() // a second load keeps the cookie
	if c.cookies["outbox_csrf"].Value != first {
		t.Error("a reload changed the CSRF cookie")
	}
	if other := newClient(t, c.h); true {
		other.page()
		if other.cookies["outbox_csrf"].Value == first {
			t.Error("two browsers got the same CSRF cookie")
		}
	}
	if w := c.do("GET", "/assets/app.js", nil, nil); w.Code != 200 || w.Body.Len() == 0 || w.Header().Get("X-Frame-Options") != "DENY" {
		t.Errorf("GET /assets/app.js: %d, %d bytes", w.Code, w.Body.Len())
	}
	for _, p := range []string{"/assets/", "/assets/nope.js", "/nope", "/api/nope"} {
		if w := c.do("GET", p, nil, nil); w.Code != 404 {
			t.Errorf("GET %s: %d, want 404", p, w.Code)
		}
	}
	for _, p := range []string{"/assets/../doc.go", "/assets/%2e%2e/doc.go", "/assets/..%2fdoc.go"} {
		if w := c.do("GET", p, nil, nil); w.Code == 200 || strings.Contains(w.Body.String(), "package ui") {
			t.Errorf("GET %s: %d: served a file outside the assets", p, w.Code)
		}
	}
	wantError(t, c.do("POST", "/api/overview", nil, nil), 405, "GET")
}

func TestOverview(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := memory.New(memory.Options{Partitions: 3, Now: clk.Now})
	ctx := context.Background()
	if err := b.Append(ctx, outbox.Entry{ID: "a", Topic: "t"}, outbox.Entry{ID: "b", Topic: "t", NotBefore: clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	clk.Add(90 * time.Second)
	s := newServer(t, b, ui.Options{StoreName: "memory", Kind: "memory", Outbox: "test", Now: clk.Now, SampleInterval: time.Second})
	c := newClient(t, s)
	var o struct {
		Store, Kind, Outbox string
		ReadOnly            bool `json:"read_only"`
		Partitions          int
		Now                 time.Time
		Stats               struct {
			Pending, Due, Parked int64
			Lag                  float64    `json:"lag_seconds"`
			OldestDue            *time.Time `json:"oldest_due"`
		}
		Held *struct {
			Held   bool
			Reason string
			Since  *time.Time
		}
		Sealed   *bool
		Interval float64 `json:"sample_interval_seconds"`
		Samples  []map[string]any
	}
	c.getJSON("/api/overview", &o)
	if o.Store != "memory" || o.Kind != "memory" || o.Outbox != "test" || o.ReadOnly || o.Partitions != 3 || !o.Now.Equal(clk.Now()) || o.Interval != 1 {
		t.Errorf("overview %+v", o)
	}
	if o.Stats.Pending != 2 || o.Stats.Due != 1 || o.Stats.Parked != 0 || o.Stats.Lag != 90 || o.Stats.OldestDue == nil {
		t.Errorf("stats %+v, want 2 pending, 1 due, lag 90s", o.Stats)
	}
	if o.Held == nil || o.Held.Held || o.Held.Since != nil || o.Sealed == nil || *o.Sealed {
		t.Errorf("held %+v sealed %v: want not held, not sealed (memory is a Holder and Sealer)", o.Held, o.Sealed)
	}
	if o.Samples == nil || len(o.Samples) != 0 {
		t.Errorf("samples %v, want [] before Run", o.Samples)
	}
	if err := b.Hold(ctx, "moving to pg"); err != nil {
		t.Fatal(err)
	}
	if err := b.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	c.getJSON("/api/overview", &o)
	if !o.Held.Held || o.Held.Reason != "moving to pg" || o.Held.Since == nil || !*o.Sealed {
		t.Errorf("held %+v sealed %v: want held and sealed", o.Held, *o.Sealed)
	}

	t.Run("WithoutHolderOrSealer", func(t *testing.T) {
		type plain struct {
			outbox.Store
			outbox.Inspector
		}
		c := newClient(t, newServer(t, plain{b, b}, ui.Options{}))
		var raw map[string]any
		c.getJSON("/api/overview", &raw)
		if v, ok := raw["held"]; !ok || v != nil {
			t.Errorf("held %v, want null", v)
		}
		if v, ok := raw["sealed"]; !ok || v != nil {
			t.Errorf("sealed %v, want null", v)
		}
		var p map[string]any
		c.getJSON("/api/partitions", &p)
		if v, ok := p["partitions"]; !ok || v != nil {
			t.Errorf("partitions %v, want null", v)
		}
		wantError(t, c.do("GET", "/api/entries/a", nil, nil), 501, "Looker")
	})
}

func TestPartitions(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := memory.New(memory.Options{Partitions: 2, Now: clk.Now})
	ctx := context.Background()
	var e0, e1 outbox.Entry // one entry in each partition
	for i := 0; e0.ID == "" || e1.ID == ""; i++ {
		e := outbox.Entry{ID: "id" + string(rune('a'+i)), Topic: "t", Key: "key" + string(rune('a'+i))}
		if outbox.PartitionOf(e.Key, 2) == 0 && e0.ID == "" {
			e0 = e
		} else if outbox.PartitionOf(e.Key, 2) == 1 && e1.ID == "" {
			e1 = e
		}
	}
	if err := b.Append(ctx, e0, e1); err != nil {
		t.Fatal(err)
	}
	clk.Add(10 * time.Second)
	if _, err := b.AcquireLease(ctx, 1, "relay-7", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))
	var p struct {
		Partitions []struct {
			Partition    int
			Pending, Due int64
			Parked       int64
			Lag          float64 `json:"lag_seconds"`
			Lease        *struct {
				Owner   string
				Version int64
				Expires time.Time
			}
		}
	}
	c.getJSON("/api/partitions", &p)
	if len(p.Partitions) != 2 {
		t.Fatalf("%d partitions, want 2", len(p.Partitions))
	}
	p0, p1 := p.Partitions[0], p.Partitions[1]
	if p0.Partition != 0 || p0.Pending != 1 || p0.Due != 1 || p0.Lag != 10 || p0.Lease != nil {
		t.Errorf("partition 0: %+v, want 1 pending, lag 10s, no lease", p0)
	}
	if p1.Partition != 1 || p1.Lease == nil || p1.Lease.Owner != "relay-7" || p1.Lease.Version < 1 || !p1.Lease.Expires.Equal(clk.Now().Add(time.Minute)) {
		t.Errorf("partition 1: %+v, want relay-7's lease", p1)
	}
}

func TestParkedFiltersAndPaging(t *testing.T) {
	t.Parallel()
	clk := newClock()
	start := clk.Now()
	const n = 10_000
	b := memoryParked(t, clk, n)
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))

	// want is what a filter should select, computed from bulk's rules.
	want := func(keep func(i int, e outbox.Entry) bool) []string {
		var out []string
		for i, e := range bulk(n) {
			if keep(i, e) {
				out = append(out, e.ID)
			}
		}
		return out
	}
	created := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second) }
	since := created(7000).Format(time.RFC3339)
	until := created(7500).Format(time.RFC3339)
	for _, tc := range []struct {
		name, q string
		keep    func(int, outbox.Entry) bool
	}{
		{"None", "", func(int, outbox.Entry) bool { return true }},
		{"Topic", "topic=payments", func(i int, _ outbox.Entry) bool { return i%2 == 1 }},
		{"TopicIsExact", "topic=pay", func(int, outbox.Entry) bool { return false }},
		{"Key", "key=k3", func(i int, _ outbox.Entry) bool { return i%7 == 3 }},
		{"ErrorIgnoresCase", "error=TIMED+OUT", func(i int, _ outbox.Entry) bool { return i%3 == 0 }},
		{"All", "topic=orders&key=k0&error=unknown_topic", func(i int, _ outbox.Entry) bool { return i%2 == 0 && i%7 == 0 && i%3 != 0 }},
		{"SinceUntil", "since=" + url.QueryEscape(since) + "&until=" + url.QueryEscape(until), func(i int, _ outbox.Entry) bool { return i >= 7000 && i < 7500 }},
		// The clock stands one second after the last entry (e09999,
		// created at start+9999s): 100s ago is e09900's creation.
		{"SinceDuration", "since=100s", func(i int, _ outbox.Entry) bool { return i >= n-100 }},
		{"UntilDuration", "until=2h", func(i int, _ outbox.Entry) bool { return created(i).Before(clk.Now().Add(-2 * time.Hour)) }},
		{"Rare", "key=k1&topic=orders&error=timed&since=" + url.QueryEscape(created(n-50).Format(time.RFC3339)), func(i int, _ outbox.Entry) bool {
			return i%7 == 1 && i%2 == 0 && i%3 == 0 && i >= n-50
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := want(tc.keep)
			for _, limit := range []int{1, 50, 500} {
				if limit == 1 && len(w) > 600 {
					continue
				}
				got := c.allParked(tc.q, limit)
				if !slices.Equal(got, w) {
					t.Fatalf("limit %d: %d entries (first %v), want %d (first %v)", limit, len(got), got[:min(3, len(got))], len(w), w[:min(3, len(w))])
				}
			}
		})
	}

	t.Run("DefaultLimitAndSummary", func(t *testing.T) {
		var p parkedPage
		c.getJSON("/api/parked", &p)
		if len(p.Entries) != 50 || p.NextAfter == nil || *p.NextAfter != "e00049" {
			t.Fatalf("%d entries, next %v; want 50, e00049", len(p.Entries), p.NextAfter)
		}
		e := p.Entries[1]
		if e.ID != "e00001" || e.Topic != "payments" || e.Key != "k1" || e.Attempts != 1 || !e.CreatedAt.Equal(created(1)) ||
			!strings.Contains(e.LastError, "UNKNOWN_TOPIC") || e.PayloadBytes != len(`{"n":1}`) {
			t.Errorf("summary %+v", e)
		}
		c.getJSON("/api/parked?limit=100000", &p)
		if len(p.Entries) != 500 {
			t.Errorf("limit=100000 gave %d entries, want the maximum, 500", len(p.Entries))
		}
	})
	t.Run("ScanCap", func(t *testing.T) {
		// Nothing matches: the first request scans 10,000 and says where
		// to go on; the next finds the end.
		var p parkedPage
		c.getJSON("/api/parked?topic=none", &p)
		if len(p.Entries) != 0 || p.NextAfter == nil || *p.NextAfter != "e09999" {
			t.Fatalf("%d entries, next %v; want none and e09999", len(p.Entries), p.NextAfter)
		}
		if p.Entries == nil {
			t.Error("entries is null, want []")
		}
	})
	t.Run("BadQueries", func(t *testing.T) {
		wantError(t, c.do("GET", "/api/parked?limit=0", nil, nil), 400, "limit")
		wantError(t, c.do("GET", "/api/parked?limit=x", nil, nil), 400, "limit")
		wantError(t, c.do("GET", "/api/parked?since=yesterday", nil, nil), 400, "since", "RFC 3339")
		wantError(t, c.do("GET", "/api/parked?until=-5m", nil, nil), 400, "until")
		wantError(t, c.do("GET", "/api/parked?since=1h&until=2h", nil, nil), 400, "not before")
	})
}

func TestLongErrorIsCutInSummaryOnly(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Options{})
	if err := b.Append(context.Background(), outbox.Entry{ID: "x", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 400) // 800 bytes; 300 falls on a rune start
	long = "x" + long                // now 300 falls inside a rune
	parkAll(t, b, func(outbox.Entry) string { return long })
	c := newClient(t, newServer(t, b, ui.Options{}))
	var p parkedPage
	c.getJSON("/api/parked", &p)
	if got := p.Entries[0].LastError; len(got) > 300 || !strings.HasPrefix(long, got) || len(got) < 298 {
		t.Errorf("summary last_error is %d bytes, want the first 300 at most, whole runes", len(got))
	}
	var d entryDetail
	c.getJSON("/api/entries/x", &d)
	if d.LastError != long {
		t.Errorf("detail last_error is %d bytes, want all %d", len(d.LastError), len(long))
	}
}

func TestEntryDetail(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := memory.New(memory.Options{Now: clk.Now})
	ctx := context.Background()
	binary := make([]byte, 100<<10)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	later := clk.Now().Add(time.Hour)
	entries := []outbox.Entry{
		{ID: "json", Topic: "t", Key: "k", Payload: []byte(` {"a":[1,2],"b":"ü"}`), Headers: map[string]string{"trace": "abc"}},
		{ID: "text", Topic: "t", Payload: []byte("hello, 世界\n")},
		{ID: "binary", Topic: "t", Payload: binary},
		{ID: "empty", Topic: "t"},
		{ID: "scheduled", Topic: "t", Payload: []byte("[1, 2"), NotBefore: later},
		{ID: "with/slash", Topic: "t", Payload: []byte("42")},
	}
	if err := b.Append(ctx, entries...); err != nil {
		t.Fatal(err)
	}
	parkAll(t, b, func(e outbox.Entry) string { return "boom " + e.ID })
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))

	var d entryDetail
	get := func(id string) {
		t.Helper()
		d = entryDetail{}
		c.getJSON("/api/entries/"+url.PathEscape(id), &d)
	}
	get("json")
	if d.ID != "json" || d.State != "parked" || d.Attempts != 1 || d.LastError != "boom json" || d.DueAt != nil || d.NotBefore != nil || d.Headers["trace"] != "abc" || !d.CreatedAt.Equal(clk.Now()) {
		t.Errorf("json entry: %+v", d)
	}
	if d.Payload.JSON == nil || *d.Payload.JSON != "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"ü\"\n}" {
		t.Errorf("json view %v, want indented", d.Payload.JSON)
	}
	if d.Payload.Text == nil || *d.Payload.Text != ` {"a":[1,2],"b":"ü"}` || d.Payload.Bytes != 21 || !strings.Contains(d.Payload.Hex, "00000000  20 7b 22 61") {
		t.Errorf("payload %+v", d.Payload)
	}

	get("text")
	if d.Payload.Text == nil || *d.Payload.Text != "hello, 世界\n" || d.Payload.JSON != nil || len(d.Headers) != 0 || d.Headers == nil {
		t.Errorf("text entry: text %v json %v headers %v", d.Payload.Text, d.Payload.JSON, d.Headers)
	}

	get("binary")
	raw, err := base64.StdEncoding.DecodeString(d.Payload.Base64)
	if err != nil || !slices.Equal(raw, binary) {
		t.Errorf("base64 does not give the payload back (%v)", err)
	}
	if d.Payload.Text != nil || d.Payload.JSON != nil || d.Payload.Bytes != len(binary) {
		t.Errorf("binary: text %v json %v bytes %d", d.Payload.Text != nil, d.Payload.JSON != nil, d.Payload.Bytes)
	}
	if lines := strings.Count(d.Payload.Hex, "\n"); lines != 64<<10/16 {
		t.Errorf("hex dump has %d lines, want the first 64 KiB (4096 lines)", lines)
	}

	get("empty")
	if d.Payload.Bytes != 0 || d.Payload.Text == nil || *d.Payload.Text != "" || d.Payload.JSON != nil || d.Payload.Base64 != "" {
		t.Errorf("empty payload %+v", d.Payload)
	}
	get("scheduled")
	if d.Payload.JSON != nil || d.NotBefore == nil || !d.NotBefore.Equal(later) {
		t.Errorf("scheduled: json %v (invalid JSON must give null), not_before %v", d.Payload.JSON, d.NotBefore)
	}
	get("with/slash")
	if d.ID != "with/slash" || d.Payload.JSON != nil { // a number is not an object or array
		t.Errorf("with/slash: %s json %v", d.ID, d.Payload.JSON)
	}

	// A pending entry.
	if err := b.Append(ctx, outbox.Entry{ID: "pending", Topic: "t", NotBefore: later}); err != nil {
		t.Fatal(err)
	}
	get("pending")
	if d.State != "pending" || d.DueAt == nil || !d.DueAt.Equal(later) || d.Attempts != 0 || d.LastError != "" {
		t.Errorf("pending entry %+v", d)
	}
	wantError(t, c.do("GET", "/api/entries/nope", nil, nil), 404, `"nope"`)
}

func TestRequeueAndCancel(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := memoryParked(t, clk, 1000)
	ctx := context.Background()
	s := newServer(t, b, ui.Options{Now: clk.Now})
	c := newClient(t, s)
	c.page()
	stats := func() outbox.Stats {
		st, err := b.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	t.Run("ByID", func(t *testing.T) {
		if err := b.Append(ctx, outbox.Entry{ID: "pending", Topic: "t", NotBefore: clk.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		var r requeueResult
		w := c.post("/api/requeue", map[string]any{"ids": []string{"e00001", "e00002", "e00001", "pending", "nope"}})
		decode(t, w, &r)
		if w.Code != 200 || r.Requeued != 2 || len(r.Refused) != 2 || r.Refused[0].ID != "pending" || !strings.Contains(r.Refused[0].Reason, "not parked") ||
			r.Refused[1].ID != "nope" || !strings.Contains(r.Refused[1].Reason, "not found") {
			t.Fatalf("%d %+v", w.Code, r)
		}
		if info, err := b.Lookup(ctx, "e00001"); err != nil || info.Parked || info.Attempts != 0 {
			t.Errorf("e00001 after requeue: %+v %v", info, err)
		}
		var x struct{ Cancelled int }
		decode(t, c.post("/api/cancel", map[string]any{"ids": []string{"e00003", "pending", "nope"}}), &x)
		if x.Cancelled != 2 {
			t.Errorf("cancelled %d, want 2 (e00003 parked, pending pending; nope does not exist)", x.Cancelled)
		}
		if _, err := b.Lookup(ctx, "e00003"); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("e00003 after cancel: %v", err)
		}
		if st := stats(); st.Parked != 997 || st.Pending != 2 {
			t.Errorf("stats %+v, want 997 parked, 2 pending", st)
		}
	})
	t.Run("ByFilter", func(t *testing.T) {
		// Topic orders (even), key k5: 1000/14 of them, less e00000..3.
		var r requeueResult
		w := c.post("/api/requeue", map[string]any{"filter": map[string]string{"topic": "orders", "key": "k5"}})
		decode(t, w, &r)
		want := 0
		for i := 4; i < 1000; i++ {
			if i%2 == 0 && i%7 == 5 {
				want++
			}
		}
		if r.Requeued != want || len(r.Refused) != 0 || r.Refused == nil {
			t.Fatalf("%+v, want %d requeued, refused []", r, want)
		}
		var p parkedPage
		c.getJSON("/api/parked?topic=orders&key=k5", &p)
		if len(p.Entries) != 0 {
			t.Errorf("%d still parked", len(p.Entries))
		}
		var x struct{ Cancelled int }
		decode(t, c.post("/api/cancel", map[string]any{"filter": map[string]string{"error": "timed out", "until": "0s"}}), &x)
		want = 0
		for i := 0; i < 1000; i++ { // e00003 was cancelled by ID
			if i%3 == 0 && i != 3 && !(i%2 == 0 && i%7 == 5) {
				want++
			}
		}
		if x.Cancelled != want {
			t.Errorf("cancelled %d, want %d", x.Cancelled, want)
		}
		c.getJSON("/api/parked?error=timed", &p)
		if len(p.Entries) != 0 {
			t.Errorf("%d timed-out entries still parked", len(p.Entries))
		}
		// An empty filter is every parked entry.
		decode(t, c.post("/api/requeue", map[string]any{"filter": map[string]string{}}), &r)
		if st := stats(); st.Parked != 0 || r.Requeued == 0 {
			t.Errorf("after requeueing all: %+v (%d requeued)", st, r.Requeued)
		}
	})
	t.Run("Refusal", func(t *testing.T) {
		// Only Import stores a parked entry without a topic; Requeue
		// refuses it.
		if _, err := b.Import(ctx, []outbox.EntryInfo{{Entry: outbox.Entry{ID: "topicless"}, Parked: true}}); err != nil {
			t.Fatal(err)
		}
		for _, body := range []any{
			map[string]any{"ids": []string{"topicless"}},
			map[string]any{"filter": map[string]string{}},
		} {
			var r requeueResult
			w := c.post("/api/requeue", body)
			decode(t, w, &r)
			if w.Code != 200 || r.Requeued != 0 || len(r.Refused) != 1 || r.Refused[0].ID != "topicless" || !strings.Contains(r.Refused[0].Reason, "no topic") {
				t.Errorf("%v: %d %+v", body, w.Code, r)
			}
		}
	})
	t.Run("BadBodies", func(t *testing.T) {
		wantError(t, c.post("/api/requeue", map[string]any{}), 400, "ids", "filter")
		wantError(t, c.post("/api/requeue", map[string]any{"ids": []string{}}), 400, "ids")
		wantError(t, c.post("/api/cancel", map[string]any{"ids": []string{"a"}, "filter": map[string]string{}}), 400, "not both")
		wantError(t, c.post("/api/cancel", map[string]any{"filter": map[string]string{"since": "soon"}}), 400, "since")
		wantError(t, c.post("/api/cancel", map[string]any{"idz": []string{"a"}}), 400, "idz")
		wantError(t, c.post("/api/requeue", "not an object"), 400)
		wantError(t, c.do("GET", "/api/requeue", nil, nil), 405, "POST")
	})
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := memoryParked(t, clk, 3)
	c := newClient(t, newServer(t, b, ui.Options{ReadOnly: true}))
	c.page()
	var o struct {
		ReadOnly bool `json:"read_only"`
	}
	c.getJSON("/api/overview", &o)
	if !o.ReadOnly {
		t.Error("overview.read_only is false")
	}
	wantError(t, c.post("/api/requeue", map[string]any{"ids": []string{"e00000"}}), 403, "read-only")
	wantError(t, c.post("/api/cancel", map[string]any{"filter": map[string]string{}}), 403, "read-only")
	if st, _ := b.Stats(context.Background()); st.Parked != 3 {
		t.Errorf("parked %d, want 3: read-only changed something", st.Parked)
	}
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := memoryParked(t, clk, 10)
	c := newClient(t, newServer(t, b, ui.Options{}))
	c.page()
	tok := c.cookies["outbox_csrf"].Value
	body := map[string]any{"ids": []string{"e00000"}}
	json := http.Header{"Content-Type": {"application/json"}}
	with := func(kv ...string) http.Header {
		h := json.Clone()
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for name, tc := range map[string]struct {
		h      http.Header
		status int
		say    string
	}{
		"MissingHeader":   {json, 403, "X-Outbox-CSRF"},
		"WrongHeader":     {with("X-Outbox-CSRF", strings.Repeat("0", 64)), 403, "does not match"},
		"ForeignOrigin":   {with("X-Outbox-CSRF", tok, "Origin", "https://evil.example"), 403, "another site"},
		"NullOrigin":      {with("X-Outbox-CSRF", tok, "Origin", "null"), 403, "another site"},
		"NotJSON":         {http.Header{"Content-Type": {"text/plain"}, "X-Outbox-CSRF": {tok}}, 415, "application/json"},
		"NoContentType":   {http.Header{"X-Outbox-CSRF": {tok}}, 415, "application/json"},
		"Good":            {with("X-Outbox-CSRF", tok), 200, ""},
		"GoodSameOrigin":  {with("X-Outbox-CSRF", tok, "Origin", "http://example.com"), 200, ""},
		"GoodJSONCharset": {http.Header{"Content-Type": {"application/json; charset=utf-8"}, "X-Outbox-CSRF": {tok}}, 200, ""},
	} {
		t.Run(name, func(t *testing.T) {
			w := c.do("POST", "/api/requeue", body, tc.h)
			if tc.status != 200 {
				wantError(t, w, tc.status, tc.say)
			} else if w.Code != 200 {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
		})
	}
	t.Run("NoCookie", func(t *testing.T) {
		fresh := newClient(t, c.h)
		wantError(t, fresh.do("POST", "/api/requeue", body, with("X-Outbox-CSRF", tok)), 403, "outbox_csrf")
	})
}

func TestAuth(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Options{})
	const token = "s3cret-token"
	t.Run("Token", func(t *testing.T) {
		s := newServer(t, b, ui.Options{Token: token})
		c := newClient(t, s)
		wantError(t, c.do("GET", "/api/overview", nil, nil), 401, "token")
		wantError(t, c.do("GET", "/", nil, nil), 401)
		wantError(t, c.do("GET", "/api/overview", nil, http.Header{"Authorization": {"Bearer nope"}}), 401)
		wantError(t, c.do("GET", "/api/overview", nil, http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+token))}}), 401)
		if w := c.do("GET", "/api/overview", nil, http.Header{"Authorization": {"Bearer " + token}}); w.Code != 200 {
			t.Fatalf("good bearer token: %d %s", w.Code, w.Body)
		}
		wantError(t, c.do("GET", "/?token=nope", nil, nil), 401, "token")
		if c.cookies["outbox_token"] != nil {
			t.Fatal("a wrong ?token= set the cookie")
		}
		w := c.do("GET", "/?token="+token+"&x=1", nil, nil)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/?x=1" {
			t.Fatalf("?token=: %d Location %q, want 303 to /?x=1", w.Code, w.Header().Get("Location"))
		}
		ck := c.cookies["outbox_token"]
		if ck == nil || !ck.HttpOnly || ck.Path != "/" {
			t.Fatalf("token cookie %+v, want HttpOnly, Path=/", ck)
		}
		c.page() // with the cookie now
		if w := c.do("GET", "/api/overview", nil, nil); w.Code != 200 {
			t.Errorf("with the cookie: %d", w.Code)
		}
		if w := c.post("/api/requeue", map[string]any{"ids": []string{"x"}}); w.Code != 200 {
			t.Errorf("action with the cookie: %d %s", w.Code, w.Body)
		}
		ck.Value = "forged"
		wantError(t, c.do("GET", "/api/overview", nil, nil), 401)
	})
	t.Run("Basic", func(t *testing.T) {
		s := newServer(t, b, ui.Options{BasicUser: "ops", BasicPassword: "pw"})
		c := newClient(t, s)
		w := c.do("GET", "/api/overview", nil, nil)
		wantError(t, w, 401, "basic")
		if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("WWW-Authenticate %q", w.Header().Get("WWW-Authenticate"))
		}
		for _, up := range []string{"ops:nope", "nope:pw", "ops:", ":pw"} {
			h := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(up))}}
			wantError(t, c.do("GET", "/api/overview", nil, h), 401)
		}
		h := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("ops:pw"))}}
		if w := c.do("GET", "/api/overview", nil, h); w.Code != 200 {
			t.Errorf("good basic: %d", w.Code)
		}
	})
	t.Run("Either", func(t *testing.T) {
		s := newServer(t, b, ui.Options{Token: token, BasicUser: "ops", BasicPassword: "pw"})
		c := newClient(t, s)
		for _, h := range []http.Header{
			{"Authorization": {"Bearer " + token}},
			{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("ops:pw"))}},
		} {
			if w := c.do("GET", "/api/overview", nil, h); w.Code != 200 {
				t.Errorf("%v: %d", h, w.Code)
			}
		}
	})
	t.Run("None", func(t *testing.T) {
		c := newClient(t, newServer(t, b, ui.Options{}))
		if w := c.do("GET", "/api/overview?token=whatever", nil, nil); w.Code != 200 {
			t.Errorf("no auth configured: %d", w.Code)
		}
	})
}

// TestNoPasswordInAnyResponse shows the store only as StoreName: no
// response of any endpoint holds the URL's password, nor the dashboard's
// own secrets.
func TestNoPasswordInAnyResponse(t *testing.T) {
	t.Parallel()
	const (
		password = "hunter2-pg-password"
		token    = "tok-3b9f1c"
		basicPW  = "basic-pw-77aa"
	)
	clk := newClock()
	b := memoryParked(t, clk, 20)
	u, _ := url.Parse("postgres://app:" + password + "@db.internal:5432/app")
	name := u.Redacted()
	s := newServer(t, b, ui.Options{StoreName: name, Kind: "postgres", Outbox: "public.outbox", Token: token, BasicUser: "ops", BasicPassword: basicPW, Now: clk.Now})
	c := newClient(t, s)
	auth := http.Header{"Authorization": {"Bearer " + token}}
	loginResp := c.do("GET", "/?token="+token, nil, nil) // sets the token cookie, as a browser does
	bodies := []string{loginResp.Body.String(), loginResp.Header().Get("Location")}
	for _, p := range []string{"/", "/api/overview", "/api/partitions", "/api/parked", "/api/entries/e00001", "/api/entries/nope", "/api/nope", "/api/parked?since=x"} {
		w := c.do("GET", p, nil, auth)
		bodies = append(bodies, w.Body.String(), w.Header().Get("Set-Cookie"))
		if p == "/api/overview" && !strings.Contains(w.Body.String(), `"store":"postgres://app:xxxxx@db.internal:5432/app"`) {
			t.Errorf("overview does not show StoreName: %s", w.Body)
		}
	}
	anon := newClient(t, s)
	for _, p := range []string{"/api/overview", "/api/requeue", "/?token=wrong"} {
		w := anon.do("GET", p, nil, nil) // unauthenticated: the error must not give the secrets
		bodies = append(bodies, w.Body.String())
	}
	c.page()
	bodies = append(bodies, c.post("/api/requeue", map[string]any{"ids": []string{"e00001"}}).Body.String())
	for _, body := range bodies {
		for _, secret := range []string{password, token, basicPW} {
			if strings.Contains(body, secret) {
				t.Errorf("a response holds the secret %q: %.300s", secret, body)
			}
		}
	}
}

func TestRunSamples(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := memory.New(memory.Options{Now: clk.Now})
	s := newServer(t, b, ui.Options{SampleInterval: 5 * time.Millisecond, Now: clk.Now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	c := newClient(t, s)
	var o struct{ Samples []map[string]any }
	deadline := time.Now().Add(10 * time.Second)
	for len(o.Samples) < 3 && time.Now().Before(deadline) {
		c.getJSON("/api/overview", &o)
		time.Sleep(5 * time.Millisecond)
	}
	if len(o.Samples) < 3 {
		t.Fatalf("%d samples after 10s of Run", len(o.Samples))
	}
	for _, k := range []string{"t", "pending", "due", "parked", "lag_seconds", "oldest_due"} {
		if _, ok := o.Samples[0][k]; !ok {
			t.Errorf("a sample has no %q: %v", k, o.Samples[0])
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx was cancelled")
	}

	// Close stops a Run.
	s2 := newServer(t, b, ui.Options{})
	go func() { done <- s2.Run(context.Background()) }()
	_ = s2.Close()
	_ = s2.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Close: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
}

func TestStoreErrors(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Options{})
	c := newClient(t, newServer(t, b, ui.Options{}))
	_ = b.Close()
	wantError(t, c.do("GET", "/api/overview", nil, nil), 503, "closed", "store is reachable")
	wantError(t, c.do("GET", "/api/parked", nil, nil), 503)
	wantError(t, c.do("GET", "/api/entries/x", nil, nil), 503)
}
