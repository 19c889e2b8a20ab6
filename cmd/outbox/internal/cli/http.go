package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/ui"
)

// The dashboard's hosting, shared by outbox ui, the relay's --ui-addr and
// outbox demo --ui: access settings and their checks, the HTTP server, and
// a handler that answers 503 until the outbox is open.

// UIPasswordEnv holds the basic-auth password of outbox ui and of
// outbox relay --ui-basic-auth (never a flag: command lines are visible).
const UIPasswordEnv = "OUTBOX_UI_PASSWORD"

// uiMinToken is the shortest token accepted.
const uiMinToken = 16

// ShutdownGrace bounds the HTTP server's graceful shutdown.
const ShutdownGrace = 5 * time.Second

// OpenTimeout bounds opening the store when a command that serves until a
// signal starts (the relay, ui).
const OpenTimeout = 30 * time.Second

// DashboardAccess is how a dashboard is served, with the names of the flags
// that set it, for messages: outbox ui's own, or the relay's --ui-*.
type DashboardAccess struct {
	// AddrFlag, TokenFlag and BasicFlag name the flags that set Addr,
	// Token and BasicUser.
	AddrFlag, TokenFlag, BasicFlag string

	Addr           string
	ReadOnly       bool
	Token          string
	BasicUser      string
	BasicPassword  string
	SampleInterval time.Duration
}

// Check returns the problems of the settings, for a usage error.
func (u *DashboardAccess) Check() []string {
	var errs []string
	host, port, err := net.SplitHostPort(u.Addr)
	if err != nil || port == "" {
		return append(errs, fmt.Sprintf("%s %q is not HOST:PORT (such as 127.0.0.1:8080; port 0 picks a free one)", u.AddrFlag, u.Addr))
	}
	if u.Token != "" && len(u.Token) < uiMinToken {
		errs = append(errs, fmt.Sprintf("%s is shorter than %d characters: use a random one (openssl rand -hex 16)", u.TokenFlag, uiMinToken))
	}
	if u.BasicUser != "" && u.BasicPassword == "" {
		errs = append(errs, fmt.Sprintf("%s %s needs its password in the %s environment variable", u.BasicFlag, u.BasicUser, UIPasswordEnv))
	}
	if u.SampleInterval <= 0 {
		errs = append(errs, fmt.Sprintf("--sample-interval must be positive (it is %v)", u.SampleInterval))
	}
	if !IsLoopbackHost(host) && u.Token == "" && u.BasicUser == "" {
		errs = append(errs, fmt.Sprintf("%s %s is not a loopback address, and the dashboard would serve anyone who can reach it: add %s (or OUTBOX_UI_TOKEN) or %s USER (password in %s), or serve it on 127.0.0.1",
			u.AddrFlag, u.Addr, u.TokenFlag, u.BasicFlag, UIPasswordEnv))
	}
	return errs
}

// IsLoopbackHost reports whether host (of HOST:PORT) is a loopback
// address or localhost; an empty host (every interface) or another name
// is not.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Options are the ui.Options of the settings for the outbox o names.
func (u *DashboardAccess) Options(storeName, kind, outboxName string, log *slog.Logger, redact func(string) string) ui.Options {
	return ui.Options{
		Redact:         redact,
		StoreName:      storeName,
		Kind:           kind,
		Outbox:         outboxName,
		ReadOnly:       u.ReadOnly,
		Token:          u.Token,
		BasicUser:      u.BasicUser,
		BasicPassword:  u.BasicPassword,
		SampleInterval: u.SampleInterval,
		Logger:         log,
	}
}

// Describe is what the serving line says after the URL: " (read-only,
// token required)".
func (u *DashboardAccess) Describe() string {
	var parts []string
	if u.ReadOnly {
		parts = append(parts, "read-only")
	}
	if u.Token != "" {
		parts = append(parts, "token required")
	}
	if u.BasicUser != "" {
		parts = append(parts, "basic auth required")
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// LazyHandler serves a dashboard that is not built yet (the store is
// still being opened) with 503, then the dashboard.
type LazyHandler struct {
	h atomic.Pointer[http.Handler]
	// Guard, when set, answers a request instead of the dashboard when
	// it returns true (the demo refuses actions while it runs).
	Guard func(http.ResponseWriter, *http.Request) bool
}

// Set makes the handler serve h.
func (l *LazyHandler) Set(h http.Handler) { l.h.Store(&h) }

func (l *LazyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := l.h.Load()
	if h == nil {
		UIError(w, http.StatusServiceUnavailable, "the dashboard is starting: the outbox is being opened; try again in a moment")
		return
	}
	if l.Guard != nil && l.Guard(w, r) {
		return
	}
	(*h).ServeHTTP(w, r)
}

// UIError answers with package ui's error shape.
func UIError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, "{\"error\": %q}\n", msg)
}

// StartUI builds the dashboard of store, sets it on h and samples until
// ctx ends; stop closes it.
func StartUI(ctx context.Context, h *LazyHandler, store outbox.Store, opts ui.Options) (stop func(), err error) {
	srv, err := ui.New(store, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		srv.Run(ctx)
	}()
	h.Set(srv)
	return func() {
		cancel()
		<-sampling
		srv.Close()
	}, nil
}

// HTTPServer is the HTTP server of a dashboard (and of the relay's
// /metrics): a slow client cannot hold a connection open for ever, with
// a request's header or body, or idle between requests. There is no
// write timeout: a requeue of many entries may take long, and ends when
// the client goes away.
func HTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// Serve serves h on ln; the returned function shuts the server down
// gracefully (bounded by ShutdownGrace).
func Serve(ln net.Listener, h http.Handler) (shutdown func()) {
	hs := HTTPServer(h)
	go func() { _ = hs.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}
}
