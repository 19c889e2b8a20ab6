package brokerproc

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// answersAMQP reports whether the node at port answers the AMQP 0-9-1
// protocol header with a method frame (connection.start).
func answersAMQP(port int) error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return err
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil {
		return err
	}
	if b[0] != 1 {
		return &net.AddrError{Err: "not a method frame", Addr: strconv.Itoa(int(b[0]))}
	}
	return nil
}

// TestRabbitMQKilledAndStartedAgainKeepsItsData starts a private node,
// records a vhost in its data, SIGKILLs its beam process, starts it again
// on the same port and data, and finds the vhost there.
func TestRabbitMQKilledAndStartedAgainKeepsItsData(t *testing.T) {
	t.Parallel()
	if _, _, err := RabbitMQServerBin(); err != nil {
		testenv.Unavailable(t, "RabbitMQ", "OUTBOX_RABBITMQ_BIN", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := StartRabbitMQ(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	if !strings.HasSuffix(r.Node, "@localhost") || !strings.HasPrefix(r.Node, "outbox-") {
		t.Errorf("node name %q, want outbox-<random>@localhost", r.Node)
	}
	if err := answersAMQP(r.Port); err != nil {
		t.Fatalf("the node does not answer AMQP on %d: %v", r.Port, err)
	}
	pid := r.Proc().PID()
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err == nil && !strings.HasPrefix(string(comm), "beam") {
		t.Errorf("the process started is %q, want the beam process itself (so that Kill kills the node)", strings.TrimSpace(string(comm)))
	}
	if out, err := r.Ctl(ctx, "add_vhost", "kept"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := r.SyncMetadata(ctx); err != nil {
		t.Fatal(err)
	}

	r.Kill()
	if !r.Proc().Exited() {
		t.Fatal("the node's process is still running after Kill")
	}
	if err := answersAMQP(r.Port); err == nil {
		t.Fatal("something still answers AMQP on the node's port after Kill")
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Proc().PID() == pid {
		t.Fatal("Start did not start a new process")
	}
	if err := answersAMQP(r.Port); err != nil {
		t.Fatalf("the node does not answer AMQP on %d after a restart: %v", r.Port, err)
	}
	out, err := r.Ctl(ctx, "list_vhosts")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "kept") {
		t.Errorf("the vhost added before the kill is gone after the restart: %s", out)
	}
	if err := r.Start(ctx); err == nil {
		t.Error("Start of a running node succeeded")
	}
	if !r.Stop(30 * time.Second) {
		t.Error("the node did not stop on SIGTERM within 30s")
	}
}
