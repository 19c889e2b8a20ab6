package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/outboxrelay/outbox/chaos/internal/servers"
	"github.com/outboxrelay/outbox/internal/brokerproc"
)

// The private broker servers come from internal/brokerproc: a
// nats-server -js with file storage, and a RabbitMQ node, each on ports
// and a data directory of its own, which Kill SIGKILLs and Start starts
// again on the same port and data.

// serverStartTimeout bounds a server's start (a RabbitMQ node takes
// several seconds on a busy machine).
const serverStartTimeout = 90 * time.Second

type natsServer struct{ *brokerproc.NATS }

func startNATSServer(ctx context.Context, dir string) (server, error) {
	bin, err := brokerproc.NATSBinary()
	if err == nil {
		// OUTBOX_NATS_SERVER is taken as it is: check it.
		_, err = os.Stat(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", missingBinary("nats-server", "nats-server"), err)
	}
	ctx, cancel := context.WithTimeout(ctx, serverStartTimeout)
	defer cancel()
	n, err := brokerproc.StartNATS(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	return natsServer{n}, nil
}

func (s natsServer) Restart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, serverStartTimeout)
	defer cancel()
	return s.Start(ctx)
}

func (s natsServer) Close() { s.Stop(5 * time.Second) }

type rabbitNode struct{ *brokerproc.RabbitMQ }

func startRabbitNode(ctx context.Context, dir string) (rabbitNode, error) {
	if _, _, err := brokerproc.RabbitMQServerBin(); err != nil {
		return rabbitNode{}, fmt.Errorf("%w (%v)", missingBinary("rabbitmq-server", "rabbitmq-server"), err)
	}
	ctx, cancel := context.WithTimeout(ctx, serverStartTimeout)
	defer cancel()
	n, err := brokerproc.StartRabbitMQ(ctx, filepath.Join(dir, "rabbitmq"))
	if err != nil {
		return rabbitNode{}, fmt.Errorf("RabbitMQ node: %w", err)
	}
	return rabbitNode{n}, nil
}

func (s rabbitNode) Restart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, serverStartTimeout)
	defer cancel()
	return s.Start(ctx)
}

func (s rabbitNode) Close() { s.Stop(15 * time.Second) }

// missingBinary is the error of a server program not installed: it wraps
// servers.ErrNotInstalled and names the Debian package.
func missingBinary(bin, pkg string) error {
	return fmt.Errorf("chaos: %s %w (Debian: apt-get install %s, or ./scripts/services.sh install)", bin, servers.ErrNotInstalled, pkg)
}
