package brokerproc_test

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/internal/brokerproc"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// natsInfo connects to 127.0.0.1:port and returns the INFO line a NATS
// server greets with.
func natsInfo(t *testing.T, port int) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read INFO: %v", err)
	}
	return line
}

// TestNATSKillAndStartAgain: the private server answers as a NATS server
// with JetStream, dies on Kill, and comes back on the same port and store
// with Start; Stop ends it by SIGTERM.
func TestNATSKillAndStartAgain(t *testing.T) {
	t.Parallel()
	if _, err := brokerproc.NATSBinary(); err != nil {
		testenv.Unavailable(t, "nats-server", "OUTBOX_NATS_SERVER", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := brokerproc.StartNATS(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	if !strings.HasPrefix(n.URL(), "nats://127.0.0.1:") {
		t.Fatalf("URL %q", n.URL())
	}
	info := natsInfo(t, n.Port)
	if !strings.HasPrefix(info, "INFO ") || !strings.Contains(info, `"jetstream":true`) {
		t.Fatalf("not a NATS server with JetStream: %q", info)
	}
	first := n.Proc()
	n.Kill()
	if !first.Exited() {
		t.Fatal("Kill returned before the process ended")
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n.Proc() == first || n.Proc().PID() == first.PID() {
		t.Fatal("Start did not start a new process")
	}
	if err := n.Start(ctx); err == nil {
		t.Fatal("Start of a running server did not fail")
	}
	if info := natsInfo(t, n.Port); !strings.Contains(info, `"jetstream":true`) {
		t.Fatalf("after the restart: %q", info)
	}
	if !n.Stop(30 * time.Second) {
		t.Fatal("nats-server did not end by SIGTERM within 30s")
	}
}
