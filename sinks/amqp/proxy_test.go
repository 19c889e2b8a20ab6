package amqpsink_test

import (
	"net"
	"sync"
	"testing"
)

// faultProxy forwards TCP connections to a broker and can cut or stall
// them, as a network would: the sink under test connects through it, the
// broker is real. Stalled, it forwards nothing either way (a partition);
// bytes a client sent during the stall are delivered at the heal, unless
// the client dropped its connection meanwhile (its kernel would not
// retransmit them then). Refusing, it closes every connection and every
// new one (a broker gone).
type faultProxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	cond     *sync.Cond
	stalled  bool
	refusing bool
	conns    map[net.Conn]bool
}

func newFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.stalled = false
		for c := range p.conns {
			_ = c.Close()
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refusing := p.refusing
		p.mu.Unlock()
		if refusing {
			_ = c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = true, true
		p.mu.Unlock()
		up, down := &flow{}, &flow{}
		go p.read(c, up, true)
		go p.write(u, up)
		go p.read(u, down, false)
		go p.write(c, down)
	}
}

// flow is one direction of a connection: what was read and not written yet.
type flow struct {
	buf [][]byte
	eof bool
}

func (p *faultProxy) read(src net.Conn, f *flow, fromClient bool) {
	b := make([]byte, 64<<10)
	for {
		n, err := src.Read(b)
		p.mu.Lock()
		if n > 0 {
			f.buf = append(f.buf, append([]byte(nil), b[:n]...))
		}
		if err != nil {
			f.eof = true
			if fromClient && p.stalled {
				f.buf = nil // the client reset its connection: nothing more comes
			}
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (p *faultProxy) write(dst net.Conn, f *flow) {
	for {
		p.mu.Lock()
		for p.stalled || (len(f.buf) == 0 && !f.eof) {
			p.cond.Wait()
		}
		chunks, eof := f.buf, f.eof
		f.buf = nil
		p.mu.Unlock()
		for _, c := range chunks {
			if _, err := dst.Write(c); err != nil {
				_ = dst.Close()
				return
			}
		}
		if eof {
			_ = dst.Close()
			return
		}
	}
}

// stall stops forwarding; heal resumes it.
func (p *faultProxy) stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// refuse closes every connection and refuses new ones until heal.
func (p *faultProxy) refuse() {
	p.mu.Lock()
	p.refusing = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
}

func (p *faultProxy) heal() {
	p.mu.Lock()
	p.stalled, p.refusing = false, false
	p.cond.Broadcast()
	p.mu.Unlock()
}
