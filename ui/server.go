package ui

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outbox"
)

// Default option values.
const (
	// DefaultSampleInterval is Options.SampleInterval's default.
	DefaultSampleInterval = 5 * time.Second
	// DefaultHistory is Options.History's default.
	DefaultHistory = 15 * time.Minute
	// maxSamples bounds the ring buffer (and /api/overview's samples).
	maxSamples = 10_000
)

// Options configure a [Server]. The zero value serves an unnamed store,
// read-write, without authentication (fit for a loopback address only).
type Options struct {
	// StoreName is how the page and /api/overview name the store, in place
	// of its URL: pass the URL with its password removed (or any label).
	// The server never sees the URL, so it cannot show a password. Default
	// "".
	StoreName string
	// Kind is the backend's kind ("postgres", "mysql", "redis", "memory"), shown as
	// it is. Default "".
	Kind string
	// Outbox names the outbox within the store (a schema and table, a key
	// prefix), shown as it is. Default "".
	Outbox string
	// ReadOnly answers every POST with 403 and tells the page to show no
	// action. Default false.
	ReadOnly bool
	// Token, when set, is needed by every request: the header
	// "Authorization: Bearer TOKEN", the cookie a first request with
	// ?token=TOKEN sets, or (when BasicUser is set too) the basic
	// credentials. Default "": no token.
	Token string
	// BasicUser and BasicPassword, when BasicUser is set, are HTTP basic
	// credentials every request needs (or the Token). Default "": none.
	BasicUser, BasicPassword string
	// SampleInterval is how often [Server.Run] samples the counts for the
	// charts. Default 5s ([DefaultSampleInterval]); negative values are
	// rejected.
	SampleInterval time.Duration
	// History is how far back the samples go: the ring buffer holds
	// History/SampleInterval of them (at least 1, at most 10,000: a
	// shorter SampleInterval shortens the history). Default 15m
	// ([DefaultHistory]); negative values are rejected.
	History time.Duration
	// Redact, when set, is applied to the text of every store error before
	// a response carries it (the drivers' errors should hold no password,
	// but a caller that knows its secrets can make sure). Default nil.
	Redact func(string) string
	// Logger receives the sampler's errors (a failed Stats call) at WARN.
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the samples, of "now" in /api/overview, of the
	// lag and of durations ago in filters. Default time.Now.
	Now func() time.Time
}

// validate applies the defaults and rejects what cannot work.
func (o *Options) validate() error {
	switch {
	case o.SampleInterval < 0:
		return fmt.Errorf("ui: Options.SampleInterval is %v; use a positive duration, or 0 for %v", o.SampleInterval, DefaultSampleInterval)
	case o.History < 0:
		return fmt.Errorf("ui: Options.History is %v; use a positive duration, or 0 for %v", o.History, DefaultHistory)
	case o.BasicUser == "" && o.BasicPassword != "":
		return errors.New("ui: Options.BasicPassword is set without Options.BasicUser; set both, or neither")
	}
	if o.SampleInterval == 0 {
		o.SampleInterval = DefaultSampleInterval
	}
	if o.History == 0 {
		o.History = DefaultHistory
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Server is the dashboard: an [http.Handler] over one outbox store, and a
// sampler ([Server.Run]) that keeps the recent counts for the charts. It is
// safe for concurrent use. Create it with [New].
type Server struct {
	store outbox.Store
	in    outbox.Inspector
	opts  Options
	mux   *http.ServeMux

	mu      sync.Mutex
	ring    []sample      // the samples, a ring of cap(ring); oldest at next
	next    int           // where the next sample goes once the ring is full
	stop    chan struct{} // closed by Close
	stopped sync.Once
}

// New returns a dashboard over store, which must implement
// [outbox.Inspector]; the other operator interfaces (PartitionInspector,
// Looker, Canceler, Holder, Sealer) are used when it implements them. The
// server does not own store: Close leaves it open. Call [Server.Run] for
// the charts' samples.
func New(store outbox.Store, opts Options) (*Server, error) {
	if store == nil {
		return nil, errors.New("ui: the store is nil; pass an opened outbox store")
	}
	in, ok := store.(outbox.Inspector)
	if !ok {
		return nil, fmt.Errorf("ui: the store (%T) does not implement outbox.Inspector, which the dashboard needs; use a backend of this module", store)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	n := min(max(opts.History/opts.SampleInterval, 1), maxSamples)
	s := &Server{store: store, in: in, opts: opts, ring: make([]sample, 0, int(n)), stop: make(chan struct{})}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("/{$}", s.handlePage)
	m.HandleFunc("/assets/", s.handleAsset)
	m.HandleFunc("/api/overview", s.handleOverview)
	m.HandleFunc("/api/partitions", s.handlePartitions)
	m.HandleFunc("/api/parked", s.handleParked)
	m.HandleFunc("/api/entries", s.handleList)
	m.HandleFunc("/api/entries/{id...}", s.handleEntry)
	m.HandleFunc("/api/blocked", s.handleBlocked)
	m.HandleFunc("/api/relays", s.handleRelays)
	m.HandleFunc("/api/requeue", s.handleRequeue)
	m.HandleFunc("/api/cancel", s.handleCancel)
	m.HandleFunc("/api/pause", s.handlePause)
	m.HandleFunc("/api/resume", s.handleResume)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "ui: no such page or endpoint: "+r.URL.Path+"; see the HTTP API in the package documentation of github.com/outboxrelay/outbox/ui")
	})
	s.mux = m
}

// ServeHTTP serves the page, its assets and the API. Every response
// carries the security headers; every request is authenticated when
// Options.Token or Options.BasicUser is set.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if !s.authenticate(w, r) {
		return
	}
	if s.opts.ReadOnly && r.Method == http.MethodPost {
		writeError(w, http.StatusForbidden, readOnlyMessage)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Close stops [Server.Run]. It does not close the store and is
// idempotent; the handler keeps answering after it.
func (s *Server) Close() error {
	s.stopped.Do(func() { close(s.stop) })
	return nil
}

// handlePage serves the page, and gives the browser its CSRF cookie.
func (s *Server) handlePage(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	page, err := fs.ReadFile(assets, "index.html")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "ui: the page is missing from the build ("+err.Error()+"); rebuild with ui/assets/index.html present")
		return
	}
	s.setCSRFCookie(w, r)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(page)
}

// handleAsset serves /assets/NAME as the file NAME of assets (whose root
// is the folder ui/assets), never a directory listing.
func (s *Server) handleAsset(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/assets/")
	if st, err := fs.Stat(assets, name); err != nil || st.IsDir() || !fs.ValidPath(name) {
		writeError(w, http.StatusNotFound, "ui: no such asset: "+r.URL.Path)
		return
	}
	http.ServeFileFS(w, r, assets, name)
}

// allow answers 405 unless r's method is method (GET also allows HEAD).
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("ui: %s takes %s, not %s", r.URL.Path, method, r.Method))
	return false
}

// Run samples the counts every Options.SampleInterval into the ring
// buffer the charts show, starting with one sample at once, until ctx is
// done (it returns ctx.Err()) or [Server.Close] is called (it returns
// nil). A failed sample is logged and skipped. Run once per Server.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.SampleInterval)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return nil
		case <-t.C:
		}
	}
}

// sample takes one sample of the counts.
func (s *Server) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.SampleInterval+5*time.Second)
	defer cancel()
	st, err := s.in.Stats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Logger.Warn("ui: sampling the counts failed; the charts miss this sample", "err", err)
		}
		return
	}
	s.record(sample{T: s.opts.Now().UTC(), Stats: st})
}

// sample is one sample of the counts.
type sample struct {
	T time.Time
	outbox.Stats
}

// record adds smp to the ring, dropping the oldest when it is full.
func (s *Server) record(smp sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, smp)
		return
	}
	s.ring[s.next] = smp
	s.next = (s.next + 1) % len(s.ring)
}

// samples returns the samples, oldest first.
func (s *Server) samples() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]sample, 0, len(s.ring))
	out = append(out, s.ring[s.next:]...)
	return append(out, s.ring[:s.next]...)
}
