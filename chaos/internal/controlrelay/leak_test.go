package controlrelay

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vmRSS is this process's resident memory in bytes.
func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// The leak mode's slice really holds resident memory that the garbage
// collector cannot take back: what the soak's trend check must see.
func TestLeakerHoldsResidentMemory(t *testing.T) {
	// Not parallel: it reads the process's RSS.
	const rate = 128 << 20 // bytes per second, so the test is quick
	runtime.GC()
	before := vmRSS(t)
	l := &leaker{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx, rate, 10*time.Millisecond) }()
	for l.held() < 64<<20 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	runtime.GC()
	held := l.held()
	grown := vmRSS(t) - before
	if grown < held*3/4 {
		t.Errorf("the leaker holds %d bytes but the RSS grew by %d only", held, grown)
	}
	runtime.KeepAlive(l)
	t.Logf("held %d MiB, RSS grew by %d MiB", held>>20, grown>>20)
}

func TestLeakModeFlags(t *testing.T) {
	t.Parallel()
	base := []string{"-store", "redis://127.0.0.1:1/0", "-kafka-brokers", "127.0.0.1:1"}
	c, err := parseFlags(append([]string{"-mode", "leak", "-leak-rate", "1024"}, base...), os.Stderr)
	if err != nil || c.mode != modeLeak || c.leakRate != 1024 {
		t.Errorf("parseFlags = %+v, %v", c, err)
	}
	if _, err := parseFlags(append([]string{"-mode", "leak", "-leak-rate", "0"}, base...), os.Stderr); err == nil || !strings.Contains(err.Error(), "-leak-rate") {
		t.Errorf("-leak-rate 0: %v", err)
	}
}
