package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/ui"
)

// A filter matching more than one action takes: each post acts on 10,000
// entries and says "more" until none is left.
func TestFilteredActionIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := memory.New(memory.Options{Partitions: 2})
	const n = 10_007
	es := make([]outbox.Entry, n)
	for i := range es {
		es[i] = outbox.Entry{ID: fmt.Sprintf("p%05d", i), Topic: "t", Key: fmt.Sprint("k", i%50)}
	}
	if err := b.Append(ctx, es...); err != nil {
		t.Fatal(err)
	}
	for p := range b.Partitions() {
		l, err := b.AcquireLease(ctx, p, "seed", 60e9)
		if err != nil {
			t.Fatal(err)
		}
		for {
			got, err := b.FindPendingBatch(ctx, l, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			var fs []outbox.Failure
			for _, e := range got {
				fs = append(fs, outbox.Failure{ID: e.ID, Error: "boom", Park: true})
			}
			if err := b.MarkFailed(ctx, l, fs); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, err := ui.New(b, ui.Options{})
	if err != nil {
		t.Fatal(err)
	}
	post := func() map[string]any {
		t.Helper()
		page := httptest.NewRecorder()
		s.ServeHTTP(page, httptest.NewRequest(http.MethodGet, "/", nil))
		var csrf *http.Cookie
		for _, c := range page.Result().Cookies() {
			if c.Name == "outbox_csrf" {
				csrf = c
			}
		}
		if csrf == nil {
			t.Fatal("no CSRF cookie")
		}
		req := httptest.NewRequest(http.MethodPost, "/api/cancel", strings.NewReader(`{"filter":{"topic":"t"}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Outbox-CSRF", csrf.Value)
		req.AddCookie(csrf)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
		}
		if rec.Header().Get("X-Outbox-More") != "" {
			t.Fatal("the internal mark leaked into the response headers")
		}
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := post(); got["cancelled"] != float64(10_000) || got["more"] != true {
		t.Fatalf("first post: %v, want 10000 cancelled and more", got)
	}
	if got := post(); got["cancelled"] != float64(7) || got["more"] != false {
		t.Fatalf("second post: %v, want 7 cancelled and no more", got)
	}
	if st, _ := b.Stats(ctx); st.Parked != 0 {
		t.Fatalf("%d parked left", st.Parked)
	}
}

type failingStore struct{ *memory.Backend }

func (failingStore) Stats(context.Context) (outbox.Stats, error) {
	return outbox.Stats{}, errors.New("dial tcp: password s3cret-pw rejected")
}

// Options.Redact cleans store errors before a response carries them.
func TestStoreErrorsAreRedacted(t *testing.T) {
	t.Parallel()
	s, err := ui.New(failingStore{memory.New(memory.Options{Partitions: 1})}, ui.Options{
		Redact: func(s string) string { return strings.ReplaceAll(s, "s3cret-pw", "xxxxx") },
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/overview", nil))
	if rec.Code < 500 || strings.Contains(rec.Body.String(), "s3cret-pw") || !strings.Contains(rec.Body.String(), "xxxxx") {
		t.Fatalf("overview of a failing store: %d %s", rec.Code, rec.Body)
	}
}
