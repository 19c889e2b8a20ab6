package relaycmd

import (
	"net/http"
	"testing"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
)

// TestUIHTTPServerTimeouts: the dashboard's servers (outbox ui, relay
// --ui-addr on its own or next to /metrics, demo --ui) bound how long a
// client may take to send a request and may idle.
func TestUIHTTPServerTimeouts(t *testing.T) {
	t.Parallel()
	for name, hs := range map[string]*http.Server{
		"ui":    cli.HTTPServer(http.NotFoundHandler()),
		"relay": relayServer(http.NotFoundHandler(), &relayReadiness{}, http.NotFoundHandler()),
	} {
		if hs.ReadHeaderTimeout <= 0 || hs.ReadTimeout <= 0 || hs.IdleTimeout <= 0 {
			t.Errorf("%s: ReadHeaderTimeout %v, ReadTimeout %v, IdleTimeout %v: want all set", name, hs.ReadHeaderTimeout, hs.ReadTimeout, hs.IdleTimeout)
		}
	}
}
