package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/ui"
)

// UICmd is outbox ui: the dashboard of one outbox (package ui), served
// until SIGTERM or SIGINT.
type UICmd struct {
	StoreFlags

	Addr           string        `name:"addr" default:"127.0.0.1:8080" placeholder:"HOST:PORT" help:"Address to serve the dashboard on; port 0 picks a free one. An address other than a loopback one needs --token or --basic-auth. Default: ${default}."`
	ReadOnly       bool          `name:"read-only" help:"Show the outbox but refuse every action (requeue, cancel): the page offers none and every POST is answered 403."`
	Token          string        `name:"token" env:"OUTBOX_UI_TOKEN" placeholder:"TOKEN" help:"Require this token (at least 16 characters) on every request: the header 'Authorization: Bearer TOKEN', or ?token=TOKEN once in the browser, which sets a cookie. Prefer the environment variable, as other users of the host can read command lines. Never printed."`
	BasicAuth      string        `name:"basic-auth" placeholder:"USER" help:"Require HTTP basic authentication as USER, with the password in the OUTBOX_UI_PASSWORD environment variable."`
	SampleInterval time.Duration `name:"sample-interval" default:"5s" placeholder:"DURATION" help:"How often the server samples the outbox's counts for the charts (one Stats call per interval). Default: ${default}."`
}

// Help is the description in outbox ui --help.
func (c *UICmd) Help() string {
	return `Serves a web page that shows the outbox (pending, due, parked, lag, charts of each, the partitions and their leases, the parked entries and each entry's payload) and, unless --read-only, requeues and cancels parked entries. See docs/dashboard.md.

It listens on 127.0.0.1:8080 by default. Listening on any other than a loopback address needs --token or --basic-auth; actions need the page's CSRF cookie, so another site cannot post to it. The store's password is never shown.`
}

// uiPasswordEnv holds the basic-auth password of outbox ui and of
// outbox relay --ui-basic-auth (never a flag: command lines are visible).
const uiPasswordEnv = "OUTBOX_UI_PASSWORD"

// uiMinToken is the shortest token accepted.
const uiMinToken = 16

// uiShutdownGrace bounds the HTTP server's graceful shutdown.
const uiShutdownGrace = 5 * time.Second

// uiAccess is how a dashboard is served, with the names of the flags
// that set it, for messages: outbox ui's own, or the relay's --ui-*.
type uiAccess struct {
	addrFlag, tokenFlag, basicFlag string

	addr           string
	readOnly       bool
	token          string
	basicUser      string
	basicPassword  string
	sampleInterval time.Duration
}

// check returns the problems of the settings, for a usage error.
func (u *uiAccess) check() []string {
	var errs []string
	host, port, err := net.SplitHostPort(u.addr)
	if err != nil || port == "" {
		return append(errs, fmt.Sprintf("%s %q is not HOST:PORT (such as 127.0.0.1:8080; port 0 picks a free one)", u.addrFlag, u.addr))
	}
	if u.token != "" && len(u.token) < uiMinToken {
		errs = append(errs, fmt.Sprintf("%s is shorter than %d characters: use a random one (openssl rand -hex 16)", u.tokenFlag, uiMinToken))
	}
	if u.basicUser != "" && u.basicPassword == "" {
		errs = append(errs, fmt.Sprintf("%s %s needs its password in the %s environment variable", u.basicFlag, u.basicUser, uiPasswordEnv))
	}
	if u.sampleInterval <= 0 {
		errs = append(errs, fmt.Sprintf("--sample-interval must be positive (it is %v)", u.sampleInterval))
	}
	if !isLoopbackHost(host) && u.token == "" && u.basicUser == "" {
		errs = append(errs, fmt.Sprintf("%s %s is not a loopback address, and the dashboard would serve anyone who can reach it: add %s (or OUTBOX_UI_TOKEN) or %s USER (password in %s), or serve it on 127.0.0.1",
			u.addrFlag, u.addr, u.tokenFlag, u.basicFlag, uiPasswordEnv))
	}
	return errs
}

// isLoopbackHost reports whether host (of HOST:PORT) is a loopback
// address or localhost; an empty host (every interface) or another name
// is not.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// options are the ui.Options of the settings for the outbox o names.
func (u *uiAccess) options(storeName, kind, outboxName string, log *slog.Logger, redact func(string) string) ui.Options {
	return ui.Options{
		Redact:         redact,
		StoreName:      storeName,
		Kind:           kind,
		Outbox:         outboxName,
		ReadOnly:       u.readOnly,
		Token:          u.token,
		BasicUser:      u.basicUser,
		BasicPassword:  u.basicPassword,
		SampleInterval: u.sampleInterval,
		Logger:         log,
	}
}

// describe is what the serving line says after the URL: " (read-only,
// token required)".
func (u *uiAccess) describe() string {
	var parts []string
	if u.readOnly {
		parts = append(parts, "read-only")
	}
	if u.token != "" {
		parts = append(parts, "token required")
	}
	if u.basicUser != "" {
		parts = append(parts, "basic auth required")
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func (c *UICmd) access() *uiAccess {
	pw := os.Getenv(uiPasswordEnv)
	return &uiAccess{
		addrFlag: "--addr", tokenFlag: "--token", basicFlag: "--basic-auth",
		addr: c.Addr, readOnly: c.ReadOnly, token: c.Token,
		basicUser: c.BasicAuth, basicPassword: pw,
		sampleInterval: c.SampleInterval,
	}
}

// Run serves the dashboard until SIGTERM or SIGINT.
func (c *UICmd) Run(app *App) error {
	u := c.access()
	if errs := u.check(); len(errs) > 0 {
		return usageError("ui: %s", strings.Join(errs, "; "))
	}
	if u.basicPassword != "" && app.secrets != nil {
		app.secrets.add(u.basicPassword)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if app.stop != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-app.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}

	openCtx, cancelOpen := context.WithTimeout(ctx, relayOpenTimeout)
	opened, err := c.Open(openCtx, OpenOptions{})
	cancelOpen()
	if err != nil {
		if ctx.Err() != nil {
			return nil // a signal while opening: nothing to serve
		}
		return fmt.Errorf("ui: opening the outbox: %w", err)
	}
	defer opened.Close()

	log := slog.New(slog.NewTextHandler(app.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	known := append(urlSecrets(c.Store), u.token, u.basicPassword)
	redact := func(s string) string {
		if app.secrets != nil {
			s = app.secrets.text(s)
		}
		return redactText(s, known...)
	}
	srv, err := ui.New(opened.Store, u.options(opened.Where, opened.Kind, opened.Outbox, log, redact))
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("ui: --addr %s: %w", c.Addr, err)
	}
	hs := uiHTTPServer(srv)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		srv.Run(ctx)
	}()
	fmt.Fprintf(app.Stdout, "outbox ui: serving http://%s/%s\n", ln.Addr(), u.describe())

	select {
	case <-ctx.Done():
	case err = <-served:
	}
	stop() // a second signal ends the process at once
	sctx, cancel := context.WithTimeout(context.Background(), uiShutdownGrace)
	defer cancel()
	if serr := hs.Shutdown(sctx); err == nil && serr != nil {
		err = fmt.Errorf("ui: shutting down: %w", serr)
	}
	<-sampling
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("ui: serving: %w", err)
	}
	return nil
}

// lazyHandler serves a dashboard that is not built yet (the store is
// still being opened) with 503, then the dashboard.
type lazyHandler struct {
	h atomic.Pointer[http.Handler]
	// guard, when set, answers a request instead of the dashboard when
	// it returns true (the demo refuses actions while it runs).
	guard func(http.ResponseWriter, *http.Request) bool
}

func (l *lazyHandler) set(h http.Handler) { l.h.Store(&h) }

func (l *lazyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := l.h.Load()
	if h == nil {
		uiError(w, http.StatusServiceUnavailable, "the dashboard is starting: the outbox is being opened; try again in a moment")
		return
	}
	if l.guard != nil && l.guard(w, r) {
		return
	}
	(*h).ServeHTTP(w, r)
}

// uiError answers with package ui's error shape.
func uiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, "{\"error\": %q}\n", msg)
}

// startUI builds the dashboard of store, sets it on h and samples until
// ctx ends; stop closes it.
func startUI(ctx context.Context, h *lazyHandler, store outbox.Store, opts ui.Options) (stop func(), err error) {
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
	h.set(srv)
	return func() {
		cancel()
		<-sampling
		srv.Close()
	}, nil
}

// uiHTTPServer is the HTTP server of a dashboard (and of the relay's
// /metrics): a slow client cannot hold a connection open for ever, with
// a request's header or body, or idle between requests. There is no
// write timeout: a requeue of many entries may take long, and ends when
// the client goes away.
func uiHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// serveUI serves h on ln; the returned function shuts the server down
// gracefully (bounded by uiShutdownGrace).
func serveUI(ln net.Listener, h http.Handler) (shutdown func()) {
	hs := uiHTTPServer(h)
	go func() { _ = hs.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), uiShutdownGrace)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}
}
