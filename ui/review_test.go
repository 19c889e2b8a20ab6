package ui_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/ui"
)

// TestTokenRedirectStaysOnThisSite: the redirect that drops ?token= goes
// to a path of this server, never to another host (a path beginning with
// "//" or "/\" is a network-path reference to the browser).
func TestTokenRedirectStaysOnThisSite(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token-0123456789"
	s := newServer(t, memory.New(memory.Options{}), ui.Options{Token: token})
	for _, target := range []string{"//evil.example/x?token=" + token, "/\\evil.example/x?token=" + token, "///evil.example?token=" + token} {
		r := httptest.NewRequest("GET", "/", nil)
		r.URL.Path, r.URL.RawQuery, r.RequestURI = strings.SplitN(target, "?", 2)[0], strings.SplitN(target, "?", 2)[1], target
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		loc := w.Header().Get("Location")
		if w.Code != http.StatusSeeOther {
			t.Fatalf("%s: %d, want 303", target, w.Code)
		}
		if !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\") {
			t.Errorf("%s: Location %q leaves the site", target, loc)
		}
	}
}

// TestReadOnlyRefusesEveryPost: the documentation (and outbox ui
// --read-only's help) say read-only answers every POST with 403.
func TestReadOnlyRefusesEveryPost(t *testing.T) {
	t.Parallel()
	c := newClient(t, newServer(t, memory.New(memory.Options{}), ui.Options{ReadOnly: true}))
	c.page()
	for _, p := range []string{"/", "/api/overview", "/api/parked", "/api/entries/x", "/assets/app.js", "/api/requeue", "/api/cancel", "/nope"} {
		wantError(t, c.post(p, map[string]any{"ids": []string{"x"}}), 403, "read-only")
	}
}

// TestHugeHistoryIsBounded: a tiny SampleInterval must not make New
// allocate History/SampleInterval samples (15m/1µs is 900 million).
func TestHugeHistoryIsBounded(t *testing.T) {
	t.Parallel()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("New panicked: %v", p)
		}
	}()
	s, err := ui.New(memory.New(memory.Options{}), ui.Options{SampleInterval: time.Nanosecond, History: 24 * time.Hour})
	if err == nil {
		_ = s.Close()
	}
}
