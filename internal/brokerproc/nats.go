package brokerproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// NATS is a private nats-server with JetStream on 127.0.0.1, its own port
// and its own store directory (file storage), started as
//
//	nats-server -a 127.0.0.1 -p PORT -js -sd DIR -n NAME
//
// It can be killed (SIGKILL), stopped and started again on the same port
// and store, where it recovers its streams. Its methods are safe for
// concurrent use.
type NATS struct {
	// Port is the client port, fixed for the server's life.
	Port int
	// Dir is the store directory (-sd), kept across restarts.
	Dir string
	// Log is the file the server's output is appended to (Dir/nats.log).
	Log string

	bin string
	server
}

// NATSBinary finds nats-server: $OUTBOX_NATS_SERVER when set, else on
// PATH, else /usr/sbin/nats-server (where the Debian package puts it).
func NATSBinary() (string, error) {
	if b := os.Getenv("OUTBOX_NATS_SERVER"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("nats-server"); err == nil {
		return b, nil
	}
	const debian = "/usr/sbin/nats-server"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", errors.New("brokerproc: nats-server not found on PATH nor at /usr/sbin/nats-server; install it (./scripts/services.sh install, or apt-get install nats-server) or set OUTBOX_NATS_SERVER to its path")
}

// StartNATS starts a nats-server with JetStream on a port of its own
// ([PickPort]), storing in dir (created if missing), and waits until it
// accepts connections, failing when ctx ends first. A single nats-server
// listens for clients only after JetStream has recovered its streams, so
// by then the streams stored in dir are back.
func StartNATS(ctx context.Context, dir string) (*NATS, error) {
	bin, err := NATSBinary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("brokerproc: nats-server store: %w", err)
	}
	port, err := PickPort()
	if err != nil {
		return nil, err
	}
	n := &NATS{Port: port, Dir: dir, Log: filepath.Join(dir, "nats.log"), bin: bin}
	if err := n.Start(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// URL is the server's client URL, nats://127.0.0.1:PORT.
func (n *NATS) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.Port) }

// Start starts the server again, on the same port and store, and waits
// until it accepts connections. It fails if the server is running.
func (n *NATS) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.proc.Exited() {
		return fmt.Errorf("brokerproc: nats-server on port %d is running; Kill or Stop it first", n.Port)
	}
	args := []string{
		"-a", "127.0.0.1", "-p", strconv.Itoa(n.Port),
		"-js", "-sd", n.Dir,
		// A fixed name: the server's identity, and so its JetStream
		// state, is the same after a restart.
		"-n", "outbox-nats-" + strconv.Itoa(n.Port),
	}
	p, err := Start("nats-server", n.Log, n.bin, args, nil)
	if err != nil {
		return err
	}
	n.proc = p
	if err := p.WaitTCP(ctx, n.Port); err != nil {
		p.Kill()
		return err
	}
	return nil
}
