package relaycmd

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/backends/memory"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestWatchHoldLogsHeldAndReleased(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := memory.New(memory.Options{Partitions: 2})
	if err := b.Hold(ctx, "outbox move m1 from postgres://db/app"); err != nil {
		t.Fatal(err)
	}
	var buf syncBuf
	log := slog.New(slog.NewTextHandler(&buf, nil))
	done := make(chan struct{})
	go func() { defer close(done); watchHold(ctx, b, log, 10*time.Millisecond) }()
	wait := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if strings.Contains(buf.String(), want) {
				return
			}
		}
		t.Fatalf("log lacks %q:\n%s", want, buf.String())
	}
	wait("the outbox is held")
	wait("outbox move m1 from postgres://db/app")
	if err := b.Unhold(ctx); err != nil {
		t.Fatal(err)
	}
	wait("the outbox was released")
	cancel()
	<-done
	if n := strings.Count(buf.String(), "the outbox is held"); n != 1 {
		t.Errorf("held logged %d times, want once:\n%s", n, buf.String())
	}
}
