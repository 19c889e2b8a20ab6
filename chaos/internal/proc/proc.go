// Package proc starts the chaos harness's processes and signals them by
// PID. It only ever signals a process it started and has not yet reaped,
// so a PID the kernel reused for someone else's process is never hit.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is a process the harness started. Its standard output and error go
// to a log file. Methods are safe for concurrent use.
type Proc struct {
	// Name names the process in errors and logs ("relay-2").
	Name string
	// Log is the file its standard output and error go to.
	Log string

	cmd  *exec.Cmd
	done chan struct{}

	mu      sync.Mutex
	exited  bool
	waitErr error
	stopped bool
}

// Start starts bin with args and the harness's environment plus env, its
// output appended to logPath. The process gets SIGKILL if the harness
// dies (Linux), so a crashed harness leaves nothing behind.
func Start(name, logPath, bin string, args, env []string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("proc: %s: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("proc: starting %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exited, p.waitErr = true, err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// PID is the process ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and its wait error.
func (p *Proc) Exited() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited, p.waitErr
}

// ErrExited is returned when signalling a process that has already exited.
var ErrExited = errors.New("process has exited")

// Signal sends sig to the process unless it has exited. The check and the
// signal are under the same lock as the reaping, and an unreaped child's
// PID cannot be reused, so the signal never reaches another process.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return fmt.Errorf("proc: %s (PID %d): %w", p.Name, p.PID(), ErrExited)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("proc: %s (PID %d): %v: %w", p.Name, p.PID(), sig, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return nil
}

// Kill sends SIGKILL and waits until the process is reaped.
func (p *Proc) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, ErrExited) {
		return err
	}
	<-p.done
	return nil
}

// Stop sends SIGSTOP; Cont sends SIGCONT.
func (p *Proc) Stop() error { return p.Signal(syscall.SIGSTOP) }

// Cont sends SIGCONT.
func (p *Proc) Cont() error { return p.Signal(syscall.SIGCONT) }

// Terminate sends SIGTERM (and SIGCONT, should it be stopped) and waits
// up to grace for the process to exit, then kills it. It returns the
// process's wait error when it exited on its own (nil for status 0) and
// an error saying it was killed otherwise.
func (p *Proc) Terminate(grace time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, ErrExited) {
			_, werr := p.Exited()
			return werr
		}
		return err
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		_ = p.Cont()
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		_, err := p.Exited()
		return err
	case <-t.C:
		_ = p.Kill()
		return fmt.Errorf("proc: %s (PID %d) did not exit within %v of SIGTERM; killed (log: %s)", p.Name, p.PID(), grace, p.Log)
	}
}

// Wait waits for the process to exit or ctx to end.
func (p *Proc) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		_, err := p.Exited()
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
