package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/outboxrelay/outbox/chaos/internal/servers"
	"github.com/outboxrelay/outbox/internal/brokerproc"
)

// natsServer is a private nats-server -js with file storage in its dir.
type natsServer struct {
	bin, dir string
	port     int
	mu       sync.Mutex
	p        *brokerproc.Proc
}

func startNATSServer(ctx context.Context, dir string) (server, error) {
	bin, err := servers.LookPath("nats-server", "nats-server")
	if err != nil {
		return nil, err
	}
	port, err := brokerproc.PickPort()
	if err != nil {
		return nil, err
	}
	s := &natsServer{bin: bin, dir: dir, port: port}
	return s, s.Restart(ctx)
}

func (s *natsServer) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *natsServer) Restart(ctx context.Context) error {
	p, err := brokerproc.Start("nats-server", filepath.Join(s.dir, "nats-server.log"), s.bin,
		[]string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", filepath.Join(s.dir, "store")}, nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.WaitTCP(ctx, s.port); err != nil {
		p.Kill()
		return fmt.Errorf("nats-server: %w", err)
	}
	return nil
}

func (s *natsServer) proc() *brokerproc.Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

func (s *natsServer) Kill() {
	if p := s.proc(); p != nil {
		p.Kill()
	}
}

func (s *natsServer) Close() {
	if p := s.proc(); p != nil {
		p.Stop(5 * time.Second)
	}
}

func startRabbitNode(ctx context.Context, dir string) (server, error) {
	return nil, fmt.Errorf("RabbitMQ node: not yet")
}
