// Package brokerproc runs private broker servers for tests and the chaos
// harness: a nats-server with JetStream and a RabbitMQ node, each as a
// process of its own on 127.0.0.1, on its own port and directory, which a
// test can stop, kill (SIGKILL) and start again on the same port and data.
// It only ever signals processes it started, by PID.
//
// The binaries come from the Debian packages nats-server and
// rabbitmq-server (./scripts/services.sh install).
package brokerproc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Ports are picked at random from [portLow, portHigh): below Linux's
// default ephemeral range (32768-60999), so outgoing connections never hold
// them, and apart from the chaos harness's range (11000-22000 and, for
// cluster buses, 21000-32000) so the two never pick the same port.
const (
	portLow  = 23000
	portHigh = 32000
)

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // never handed out twice by this process
)

// PickPort returns a port free on 127.0.0.1 now that this process has not
// handed out before. Another process may still take it before the server
// binds it.
func PickPort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 500 {
		p := portLow + rand.IntN(portHigh-portLow)
		if portsGiven[p] || !portFree(p) {
			continue
		}
		portsGiven[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("brokerproc: no free port on 127.0.0.1 in [%d, %d)", portLow, portHigh)
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// Proc is a process this package started, with its output appended to a
// log file. Its methods are safe for concurrent use.
type Proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}

	mu      sync.Mutex
	waitErr error
}

// Start starts bin with args and the current environment plus env, its
// standard output and error appended to logPath. On Linux the process gets
// SIGKILL when the calling process dies, so nothing outlives a crashed test.
func Start(name, logPath, bin string, args, env []string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("brokerproc: %s: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("brokerproc: starting %s: %w", name, err)
	}
	p := &Proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// PID is the process's ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Log is the file the process writes its output to.
func (p *Proc) Log() string { return p.log }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process has ended and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Signal sends sig to the process unless it has already been reaped (its
// PID may then belong to another process).
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("brokerproc: %s has exited", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() {
	if p.Signal(syscall.SIGKILL) == nil {
		<-p.done
	}
}

// Stop sends SIGTERM and waits up to grace for the process to end, then
// kills it. It reports whether it ended by the SIGTERM.
func (p *Proc) Stop(grace time.Duration) bool {
	if p.Signal(syscall.SIGTERM) != nil {
		return true
	}
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
		p.Kill()
		return false
	}
}

// WaitTCP waits until something accepts connections on 127.0.0.1:port,
// failing early when the process ends or ctx is done.
func (p *Proc) WaitTCP(ctx context.Context, port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("brokerproc: %s exited before it listened on %s (see %s)", p.name, addr, p.log)
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("brokerproc: %s did not listen on %s (see %s)", p.name, addr, p.log))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// server is the process of a broker server that Start may replace (a
// restart on the same port and data): NATS and RabbitMQ embed it.
type server struct {
	mu   sync.Mutex
	proc *Proc
}

// Proc is the server's current process, or nil before the first Start.
func (s *server) Proc() *Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Kill sends SIGKILL to the server and waits for it to end: it stops
// without flushing anything, as in a crash; its data stays for the next
// Start.
func (s *server) Kill() {
	if p := s.Proc(); p != nil {
		p.Kill()
	}
}

// Stop sends SIGTERM (a clean shutdown for both servers; nats-server's
// lame-duck mode is SIGUSR2, not this) and waits up to grace, then kills
// the server. It reports whether the server ended by the SIGTERM.
func (s *server) Stop(grace time.Duration) bool {
	if p := s.Proc(); p != nil {
		return p.Stop(grace)
	}
	return true
}
