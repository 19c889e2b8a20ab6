package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/ui"
)

// clock is a fake clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newServer builds a dashboard over store, closed when t ends.
func newServer(t testing.TB, store outbox.Store, opts ui.Options) *ui.Server {
	t.Helper()
	s, err := ui.New(store, opts)
	if err != nil {
		t.Fatalf("ui.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// client talks to a handler as a browser would: it keeps cookies and, for
// POSTs, sends the CSRF header from the cookie.
type client struct {
	t       testing.TB
	h       http.Handler
	cookies map[string]*http.Cookie
}

func newClient(t testing.TB, h http.Handler) *client {
	return &client{t: t, h: h, cookies: map[string]*http.Cookie{}}
}

// do sends a request and returns the recorded response. body, when not
// nil, is encoded as JSON.
func (c *client) do(method, target string, body any, header http.Header) *httptest.ResponseRecorder {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	r := httptest.NewRequest(method, target, rd)
	for _, ck := range c.cookies {
		r.AddCookie(ck)
	}
	for k, vs := range header {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, r)
	for _, ck := range w.Result().Cookies() {
		c.cookies[ck.Name] = ck
	}
	return w
}

// page loads / (which sets the CSRF cookie).
func (c *client) page() {
	c.t.Helper()
	if w := c.do("GET", "/", nil, nil); w.Code != http.StatusOK {
		c.t.Fatalf("GET /: %d %s", w.Code, w.Body)
	}
}

// post sends an action as the page does.
func (c *client) post(path string, body any) *httptest.ResponseRecorder {
	c.t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	if ck := c.cookies["outbox_csrf"]; ck != nil {
		h.Set("X-Outbox-CSRF", ck.Value)
	}
	return c.do("POST", path, body, h)
}

// getJSON GETs target, wants 200 and decodes the body into v.
func (c *client) getJSON(target string, v any) {
	c.t.Helper()
	w := c.do("GET", target, nil, nil)
	if w.Code != http.StatusOK {
		c.t.Fatalf("GET %s: %d %s", target, w.Code, w.Body)
	}
	decode(c.t, w, v)
}

func decode(t testing.TB, w *httptest.ResponseRecorder, v any) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json (body %s)", ct, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		t.Fatalf("decoding %s: %v", w.Body, err)
	}
}

// wantError checks an error response: the status and a JSON error whose
// text contains every one of parts.
func wantError(t testing.TB, w *httptest.ResponseRecorder, status int, parts ...string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d (body %s)", w.Code, status, w.Body)
	}
	var e struct{ Error string }
	decode(t, w, &e)
	if !strings.HasPrefix(e.Error, "ui: ") {
		t.Errorf("error %q does not start with \"ui: \"", e.Error)
	}
	for _, p := range parts {
		if !strings.Contains(e.Error, p) {
			t.Errorf("error %q does not say %q", e.Error, p)
		}
	}
}

// parkAll claims every due entry of store and parks it with the error
// errOf gives its ID. It returns how many it parked.
func parkAll(t testing.TB, store outbox.Store, errOf func(outbox.Entry) string) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	for p := range store.Partitions() {
		lease, err := store.AcquireLease(ctx, p, "ui-test", time.Hour)
		if err != nil {
			t.Fatalf("AcquireLease %d: %v", p, err)
		}
		for {
			batch, err := store.FindPendingBatch(ctx, lease, 1000)
			if err != nil {
				t.Fatalf("FindPendingBatch: %v", err)
			}
			if len(batch) == 0 {
				break
			}
			fs := make([]outbox.Failure, len(batch))
			for i, e := range batch {
				fs[i] = outbox.Failure{ID: e.ID, Error: errOf(e), Park: true}
			}
			if err := store.MarkFailed(ctx, lease, fs); err != nil {
				t.Fatalf("MarkFailed: %v", err)
			}
			n += len(batch)
		}
		if err := store.ReleaseLease(ctx, lease); err != nil {
			t.Fatalf("ReleaseLease: %v", err)
		}
	}
	return n
}

// bulk are n entries e00000, e00001, ... of topics orders and payments
// (alternating) and keys k0..k6, with small JSON payloads.
func bulk(n int) []outbox.Entry {
	es := make([]outbox.Entry, n)
	for i := range es {
		topic := "orders"
		if i%2 == 1 {
			topic = "payments"
		}
		es[i] = outbox.Entry{ID: fmt.Sprintf("e%05d", i), Topic: topic, Key: fmt.Sprintf("k%d", i%7), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return es
}

// bulkError is the parking error of bulk's entries: every third times out.
func bulkError(e outbox.Entry) string {
	var i int
	fmt.Sscanf(e.ID, "e%d", &i)
	if i%3 == 0 {
		return "kafka: Request Timed Out after 30s"
	}
	return "kafka: UNKNOWN_TOPIC_OR_PARTITION: topic " + e.Topic + " does not exist (create it, then requeue)"
}

// memoryParked is a memory backend with n of bulk's entries parked, one
// created per second of clk from its start.
func memoryParked(t testing.TB, clk *clock, n int) *memory.Backend {
	t.Helper()
	b := memory.New(memory.Options{Partitions: 4, Now: clk.Now})
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	for _, e := range bulk(n) {
		if err := b.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
	}
	if got := parkAll(t, b, bulkError); got != n {
		t.Fatalf("parked %d, want %d", got, n)
	}
	return b
}

type summary struct {
	ID           string    `json:"id"`
	Topic        string    `json:"topic"`
	Key          string    `json:"key"`
	Partition    int       `json:"partition"`
	Attempts     int       `json:"attempts"`
	CreatedAt    time.Time `json:"created_at"`
	LastError    string    `json:"last_error"`
	PayloadBytes int       `json:"payload_bytes"`
}

type parkedPage struct {
	Entries   []summary `json:"entries"`
	NextAfter *string   `json:"next_after"`
}

type entryDetail struct {
	summary
	State     string            `json:"state"`
	NotBefore *time.Time        `json:"not_before"`
	DueAt     *time.Time        `json:"due_at"`
	Headers   map[string]string `json:"headers"`
	Payload   struct {
		Bytes  int     `json:"bytes"`
		Text   *string `json:"text"`
		JSON   *string `json:"json"`
		Hex    string  `json:"hex"`
		Base64 string  `json:"base64"`
	} `json:"payload"`
}

type requeueResult struct {
	Requeued int `json:"requeued"`
	Refused  []struct {
		ID     string `json:"id"`
		Reason string `json:"reason"`
	} `json:"refused"`
}

// allParked pages through /api/parked with query q and returns the IDs
// in order, failing on any repeat.
func (c *client) allParked(q string, limit int) []string {
	c.t.Helper()
	var out []string
	seen := map[string]bool{}
	after := ""
	for i := 0; ; i++ {
		if i > 100_000 {
			c.t.Fatal("paging does not end")
		}
		var p parkedPage
		c.getJSON(fmt.Sprintf("/api/parked?%s&limit=%d&after=%s", q, limit, after), &p)
		if len(p.Entries) > limit {
			c.t.Fatalf("page of %d entries, limit %d", len(p.Entries), limit)
		}
		for _, e := range p.Entries {
			if seen[e.ID] {
				c.t.Fatalf("entry %s on two pages", e.ID)
			}
			seen[e.ID] = true
			out = append(out, e.ID)
		}
		if p.NextAfter == nil {
			return out
		}
		after = *p.NextAfter
	}
}
