package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/outboxrelay/outbox/ui"
)

// demoDashboard is the dashboard of outbox demo --ui.
type demoDashboard struct {
	url string
	// running refuses actions while the run goes on: a requeue or a
	// cancel would change the counts it checks.
	running atomic.Bool
	stop    func()
}

// startDemoDashboard serves the dashboard of db's outbox on --ui-addr.
func startDemoDashboard(ctx context.Context, c *DemoCmd, db *demoBackend) (*demoDashboard, error) {
	ln, err := net.Listen("tcp", c.UIAddr)
	if err != nil {
		return nil, fmt.Errorf("demo: --ui-addr %s: %w", c.UIAddr, err)
	}
	d := &demoDashboard{url: "http://" + ln.Addr().String() + "/"}
	d.running.Store(true)
	h := &cli.LazyHandler{Guard: func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && d.running.Load() {
			cli.UIError(w, http.StatusForbidden, "the demo is running, and a requeue or cancel would change the counts it checks: actions work once it has finished")
			return true
		}
		return false
	}}
	storeName := db.name
	if c.Store != "" {
		storeName = cli.RedactText(c.Store) + " (" + db.name + ")"
	}
	// Sampling every second: a demo run lasts seconds.
	stopUI, err := cli.StartUI(context.WithoutCancel(ctx), h, db.store, ui.Options{
		StoreName: storeName, Kind: c.Backend, SampleInterval: time.Second,
		Outbox: strings.TrimSuffix(strings.Replace(db.what, "keys ", "prefix ", 1), "*"),
		Logger: slog.New(slog.DiscardHandler),
		Redact: func(s string) string { return cli.RedactText(s) },
	})
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("demo: the dashboard: %w", err)
	}
	shutdown := cli.Serve(ln, h)
	d.stop = func() {
		shutdown()
		stopUI()
	}
	return d, nil
}
