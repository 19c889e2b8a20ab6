package proc

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestKillStopContTerminate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := Start("sleeper", filepath.Join(dir, "log"), "sleep", []string{"60"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Cont(); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := p.Exited(); !ok {
		t.Fatal("killed process not reaped")
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, ErrExited) {
		t.Fatalf("signal after exit: %v, want ErrExited", err)
	}

	// A stopped process still ends on Terminate (it is continued).
	q, err := Start("sleeper2", filepath.Join(dir, "log2"), "sleep", []string{"60"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = q.Terminate(10 * time.Second)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Terminate of a stopped sleep: %v after %v, want the SIGTERM exit status at once", err, time.Since(start))
	}
}

func TestTerminateKillsAfterGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := Start("trap", filepath.Join(dir, "log"), "sh", []string{"-c", "trap '' TERM; while :; do sleep 0.1; done"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the shell install its trap
	if err := p.Terminate(300 * time.Millisecond); err == nil {
		t.Fatal("Terminate of a process ignoring SIGTERM returned nil, want an error saying it was killed")
	}
	if ok, _ := p.Exited(); !ok {
		t.Fatal("process not reaped after Terminate killed it")
	}
}
