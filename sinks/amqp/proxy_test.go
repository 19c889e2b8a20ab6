package amqpsink_test

import (
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// faultProxy forwards TCP connections to a broker and can cut or stall
// them, as a network would: the sink under test connects through it, the
// broker is real. Stalled, it reads and forwards nothing either way (a
// partition: the senders' writes block once their socket buffers are
// full); bytes a client sent during the stall are delivered at the heal,
// unless the client dropped its connection meanwhile (its kernel would not
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
	clients  map[net.Conn]*flow // client connections and what they sent
}

func newFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]bool{}, clients: map[net.Conn]*flow{}}
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

// proxyTo returns a fault proxy to the broker of an AMQP URL.
func proxyTo(t testing.TB, url string) *faultProxy {
	t.Helper()
	u, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	return newFaultProxy(t, net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
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
		up, down := &flow{}, &flow{}
		p.mu.Lock()
		p.conns[c], p.conns[u] = true, true
		p.clients[c] = up
		p.mu.Unlock()
		go p.read(c, up, true)
		go p.write(u, up)
		go p.read(u, down, false)
		go p.write(c, down)
	}
}

// flow is one direction of a connection: what was read and not written yet.
type flow struct {
	buf  [][]byte
	eof  bool
	gone bool // the client dropped the connection during a stall: what it sent is lost
}

func (p *faultProxy) read(src net.Conn, f *flow, fromClient bool) {
	b := make([]byte, 64<<10)
	for {
		// Stalled, nothing is read: the sender's socket fills up and its
		// writes block, as with a broker that stopped reading.
		p.mu.Lock()
		for p.stalled {
			p.cond.Wait()
		}
		p.mu.Unlock()
		n, err := src.Read(b)
		p.mu.Lock()
		if n > 0 && !f.gone {
			f.buf = append(f.buf, append([]byte(nil), b[:n]...))
		}
		if err != nil {
			f.eof = true
			if fromClient && p.stalled {
				f.buf, f.gone = nil, true // the client reset its connection: nothing more comes
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
	if p.stalled {
		// A client that dropped its connection during the stall: what it
		// sent is lost with it, even if the reader has not seen the reset
		// yet (the kernel has).
		for c, f := range p.clients {
			if !established(c) {
				f.buf, f.eof, f.gone = nil, true, true
			}
		}
	}
	p.stalled, p.refusing = false, false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// established reports whether c's TCP state is still ESTABLISHED (the
// first byte of Linux's tcp_info); a peer's reset or FIN moves it on.
func established(c net.Conn) bool {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return true
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	state := -1
	_ = rc.Control(func(fd uintptr) {
		v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_INFO)
		if err == nil {
			state = v & 0xff
		}
	})
	const tcpEstablished = 1
	return state == tcpEstablished
}
