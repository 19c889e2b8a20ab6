package natssink_test

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// faultProxy forwards TCP connections from a port of its own to a server,
// to inject network faults between a sink and a real server: Stall stops
// forwarding (what was read waits, in both directions: a partition),
// Down closes every connection and refuses new ones (a server gone), and
// Heal undoes either.
type faultProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]bool
	down    bool
	stalled chan struct{} // non-nil while stalled; closed by Heal
}

// newFaultProxy forwards a port of 127.0.0.1 to target (host:port), until
// the test ends.
func newFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Heal()
		p.closeAll()
	})
	return p
}

// URL is the proxy's NATS URL.
func (p *faultProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies src to dst, holding what it read while the proxy is
// stalled.
func (p *faultProxy) pipe(src, dst net.Conn) {
	defer func() { _ = src.Close(); _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitUnstalled()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF included: the other side closes dst
			return
		}
	}
}

func (p *faultProxy) waitUnstalled() {
	p.mu.Lock()
	ch := p.stalled
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// Stall stops forwarding until Heal.
func (p *faultProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Down closes every connection and refuses new ones until Heal.
func (p *faultProxy) Down() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.closeAll()
}

// Heal forwards again and accepts connections again.
func (p *faultProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

func (p *faultProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}
