package uicmd

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
	"syscall"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/outboxrelay/outbox/ui"
)

// UICmd is outbox ui: the dashboard of one outbox (package ui), served
// until SIGTERM or SIGINT.
type UICmd struct {
	cli.StoreFlags

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

func (c *UICmd) access() *cli.DashboardAccess {
	pw := os.Getenv(cli.UIPasswordEnv)
	return &cli.DashboardAccess{
		AddrFlag: "--addr", TokenFlag: "--token", BasicFlag: "--basic-auth",
		Addr: c.Addr, ReadOnly: c.ReadOnly, Token: c.Token,
		BasicUser: c.BasicAuth, BasicPassword: pw,
		SampleInterval: c.SampleInterval,
	}
}

// Run serves the dashboard until SIGTERM or SIGINT.
func (c *UICmd) Run(app *cli.App) error {
	u := c.access()
	if errs := u.Check(); len(errs) > 0 {
		return cli.UsageError("ui: %s", strings.Join(errs, "; "))
	}
	if u.BasicPassword != "" && app.Secrets != nil {
		app.Secrets.Add(u.BasicPassword)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if app.Stop != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-app.Stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}

	openCtx, cancelOpen := context.WithTimeout(ctx, cli.OpenTimeout)
	opened, err := c.Open(openCtx, cli.OpenOptions{})
	cancelOpen()
	if err != nil {
		if ctx.Err() != nil {
			return nil // a signal while opening: nothing to serve
		}
		return fmt.Errorf("ui: opening the outbox: %w", err)
	}
	defer opened.Close()

	log := slog.New(slog.NewTextHandler(app.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	known := append(cli.URLSecrets(c.Store), u.Token, u.BasicPassword)
	redact := func(s string) string {
		if app.Secrets != nil {
			s = app.Secrets.Text(s)
		}
		return cli.RedactText(s, known...)
	}
	srv, err := ui.New(opened.Store, u.Options(opened.Where, opened.Kind, opened.Outbox, log, redact))
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("ui: --addr %s: %w", c.Addr, err)
	}
	hs := cli.HTTPServer(srv)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		srv.Run(ctx)
	}()
	fmt.Fprintf(app.Stdout, "outbox ui: serving http://%s/%s\n", ln.Addr(), u.Describe())

	select {
	case <-ctx.Done():
	case err = <-served:
	}
	stop() // a second signal ends the process at once
	sctx, cancel := context.WithTimeout(context.Background(), cli.ShutdownGrace)
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
