package natssink_test

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// faultProxy forwards TCP connections from a port of its own to a server,
// to inject network faults between a sink and a real server: Stall stops
// forwarding (what was read waits, in both directions: a partition),
// HoldReplies stops forwarding from the server only (the server stores
// what it gets, its acknowledgements wait), Down closes every connection
// and refuses new ones (a server gone), and Heal undoes them.
type faultProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]bool
	down    bool
	stalled [2]chan struct{} // [toServer, toClient]: non-nil while stalled; closed by Heal
}

// Directions of forwarding.
const (
	toServer = 0
	toClient = 1
)

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
		go p.pipe(c, s, toServer)
		go p.pipe(s, c, toClient)
	}
}

// pipe copies src to dst, holding what it read while the proxy is
// stalled.
func (p *faultProxy) pipe(src, dst net.Conn, dir int) {
	defer func() { _ = src.Close(); _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitUnstalled(dir)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF included: the other side closes dst
			return
		}
	}
}

func (p *faultProxy) waitUnstalled(dir int) {
	p.mu.Lock()
	ch := p.stalled[dir]
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// Stall stops forwarding until Heal.
func (p *faultProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for dir := range p.stalled {
		if p.stalled[dir] == nil {
			p.stalled[dir] = make(chan struct{})
		}
	}
}

// HoldReplies stops forwarding what the server sends until Heal.
func (p *faultProxy) HoldReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled[toClient] == nil {
		p.stalled[toClient] = make(chan struct{})
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
	for dir, ch := range p.stalled {
		if ch != nil {
			close(ch)
			p.stalled[dir] = nil
		}
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

// proxied is a stream capturing a subject of its own on a server, and a
// sink Dial built connected to the server through a fault proxy.
type proxied struct {
	subj  string
	st    jetstream.Stream
	proxy *faultProxy
	sink  *natssink.Sink
}

// newProxied makes a proxied for the test: stream name prefix_SUFFIX,
// subject prefix.suffix (prefix in lower case).
func newProxied(t *testing.T, server, prefix string, opts natssink.Options) *proxied {
	t.Helper()
	sfx := suffix()
	p := &proxied{subj: strings.ToLower(prefix) + "." + sfx}
	p.st = newStream(t, connect(t, server), prefix+"_"+sfx, []string{p.subj})
	u, err := url.Parse(server)
	require.NoError(t, err)
	p.proxy = newFaultProxy(t, u.Host)
	p.sink, err = natssink.Dial(p.proxy.URL(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.sink.Close() })
	return p
}

// entry is an entry of the proxied subject whose payload is its ID.
func (p *proxied) entry(id, key string) outbox.Entry {
	return outbox.Entry{ID: id, Topic: p.subj, Key: key, Payload: []byte(id)}
}

// down cuts the sink off the server and waits until its connection knows.
func (p *proxied) down(t *testing.T) {
	t.Helper()
	p.proxy.Down()
	p.waitConnected(t, false)
}

// heal lets the sink reach the server again and waits until it has
// reconnected.
func (p *proxied) heal(t *testing.T) {
	t.Helper()
	p.proxy.Heal()
	p.waitConnected(t, true)
}

func (p *proxied) waitConnected(t *testing.T, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.sink.Conn().IsConnected() != want {
		if time.Now().After(deadline) {
			t.Fatalf("the sink's connection is not connected=%v after 30s (%v)", want, p.sink.Conn().Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStored waits until the stream holds at least n messages.
func (p *proxied) waitStored(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(readAll(t, p.st)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the stream does not hold %d messages after 30s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
