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

// The Bearer scheme is matched whatever its case.
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	s, err := ui.New(memory.New(memory.Options{Partitions: 1}), ui.Options{Token: "a-token-of-16-chars"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Bearer a-token-of-16-chars", "bearer a-token-of-16-chars", "BEARER  a-token-of-16-chars"} {
		req := httptest.NewRequest(http.MethodGet, "/api/overview", nil)
		req.Header.Set("Authorization", h)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("%q: %d %s", h, rec.Code, rec.Body)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/api/overview", nil)
	req.Header.Set("Authorization", "Basic a-token-of-16-chars")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("another scheme with the token: %d, want 401", rec.Code)
	}
}

// requeueing wraps a store whose Cancel first requeues the entry it is
// asked about last time: another operator's requeue landing between the
// filter's read and the cancels.
type requeueing struct {
	*memory.Backend
	id string
}

func (r requeueing) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	if id == r.id {
		if _, err := r.Backend.Requeue(ctx, id); err != nil {
			return outbox.EntryInfo{}, err
		}
	}
	return r.Backend.Lookup(ctx, id)
}

// A cancel by filter leaves alone an entry requeued since the filter was
// read.
func TestCancelByFilterSkipsARequeuedEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := memory.New(memory.Options{Partitions: 1})
	if err := b.Append(ctx, outbox.Entry{ID: "a", Topic: "t"}, outbox.Entry{ID: "b", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	l, err := b.AcquireLease(ctx, 0, "seed", 60e9)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.FindPendingBatch(ctx, l, 10); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: "x", Park: true}, {ID: "b", Error: "x", Park: true}}); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	s, err := ui.New(requeueing{b, "b"}, ui.Options{})
	if err != nil {
		t.Fatal(err)
	}
	page := httptest.NewRecorder()
	s.ServeHTTP(page, httptest.NewRequest(http.MethodGet, "/", nil))
	var csrf *http.Cookie
	for _, c := range page.Result().Cookies() {
		if c.Name == "outbox_csrf" {
			csrf = c
		}
	}
	req := httptest.NewRequest(http.MethodPost, "/api/cancel", strings.NewReader(`{"filter":{"topic":"t"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Outbox-CSRF", csrf.Value)
	req.AddCookie(csrf)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"cancelled":1`) {
		t.Fatalf("cancel: %d %s, want 1 cancelled", rec.Code, rec.Body)
	}
	if info, err := b.Lookup(ctx, "b"); err != nil || info.Parked {
		t.Fatalf("b: %+v, %v; want it pending, not cancelled", info, err)
	}
	if _, err := b.Lookup(ctx, "a"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("a: %v, want cancelled", err)
	}
}
