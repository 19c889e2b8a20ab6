package amqpsink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/sinkhealth"
)

// landingMargin is added to the computed landing bound: the time a broker
// takes to route a publish it has read (see the package documentation,
// "Deadlines").
const landingMargin = time.Second

// LandingUnbounded is what [Sink.LandingBound] reports when nothing bounds
// how long a message can still land after Publish gave up on it: the
// connection has no heartbeat (neither the client nor the broker asked for
// one). It is negative.
const LandingUnbounded time.Duration = -1

// DefaultHeartbeat is the heartbeat interval the sink asks for when the
// amqp.Config leaves it 0 (amqp091's own default is 10s). The broker
// closes a connection it has heard nothing from for two intervals, which
// bounds how long a publish still on its way can land (see
// [Sink.LandingBound]).
const DefaultHeartbeat = 3 * time.Second

// Sink publishes outbox entries to RabbitMQ (or any AMQP 0-9-1 broker with
// publisher confirms). It implements [outbox.Sink], [outbox.KeyOrderer]
// and [outbox.LandingBounder], and is safe for concurrent use.
type Sink struct {
	url      string // redacted, for messages
	dialURL  string
	cfg      amqp.Config
	opts     Options
	landing  time.Duration
	slots    []*slot
	pending  chan struct{} // one token per unconfirmed message (MaxPending)
	health   sinkhealth.Health
	closedCh chan struct{}

	mu        sync.Mutex // guards the fields below
	sess      *session
	closed    bool
	dialErr   error         // of the last failed attempt, nil after a success
	dialing   chan struct{} // closed when the attempt under way ends; nil: none
	nextDial  time.Time     // no attempt before it
	dialDelay time.Duration
}

var (
	_ outbox.Sink           = (*Sink)(nil)
	_ outbox.KeyOrderer     = (*Sink)(nil)
	_ outbox.LandingBounder = (*Sink)(nil)
)

// Dial connects to the broker at rawURL (amqp://user:pass@host:5672/vhost
// or amqps://...) and returns a sink that publishes over that connection.
// The optional cfg is the amqp091 configuration (TLSClientConfig for
// amqps, SASL, Heartbeat, Properties, ...); its Dial function, when set,
// is used to make the TCP connection. Its Recovery must be nil: the sink
// recovers the connection itself.
//
// Dial connects once and fails if that fails (a wrong URL, credentials or
// vhost is best seen at start). After that the sink reconnects by itself:
// when the connection is lost, the messages it had not seen confirmed fail
// (transient), and the next Publish or [Sink.Ping] dials again, no sooner
// than [Options.ReconnectDelay] after a failed attempt (doubling up to
// [Options.MaxReconnectDelay]). Close closes the connection.
func Dial(rawURL string, opts Options, cfg ...amqp.Config) (*Sink, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if len(cfg) > 1 {
		return nil, errors.New("amqpsink: Dial takes at most one amqp.Config")
	}
	s := &Sink{url: redact(rawURL), dialURL: rawURL, opts: opts.withDefaults(), closedCh: make(chan struct{})}
	if len(cfg) == 1 {
		s.cfg = cfg[0]
	}
	if s.cfg.Recovery != nil {
		return nil, errors.New("amqpsink: the amqp.Config sets Recovery; leave it nil, the sink reconnects by itself and keeps track of unconfirmed messages across reconnections")
	}
	if _, err := amqp.ParseURI(rawURL); err != nil {
		return nil, fmt.Errorf("amqpsink: bad URL %s: %s (want amqp://user:pass@host:5672/vhost or amqps://...)", s.url, scrub(err.Error(), rawURL))
	}
	if s.cfg.Heartbeat == 0 {
		s.cfg.Heartbeat = DefaultHeartbeat
	}
	s.pending = make(chan struct{}, s.opts.MaxPending)
	s.slots = make([]*slot, s.opts.Channels)
	for i := range s.slots {
		s.slots[i] = &slot{sink: s}
	}
	s.dialDelay = s.opts.ReconnectDelay
	sess, err := s.dial()
	if err != nil {
		return nil, err
	}
	s.sess = sess
	s.landing = s.landingBound(sess.conn.Config.Heartbeat)
	return s, nil
}

// landingBound computes what LandingBound reports, from the heartbeat
// interval the first connection negotiated.
func (s *Sink) landingBound(heartbeat time.Duration) time.Duration {
	switch {
	case s.opts.LandingBound > 0:
		return s.opts.LandingBound
	case heartbeat <= 0:
		return LandingUnbounded
	}
	return s.opts.CloseTimeout + 2*heartbeat + landingMargin
}

// redact hides the password of an AMQP URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return scrub(raw, raw)
	}
	return u.Redacted()
}

// scrub replaces the password of rawURL in msg with xxxxx, also when
// rawURL does not parse (the client's parse errors quote the URL).
func scrub(msg, rawURL string) string {
	rest, ok := strings.CutPrefix(rawURL, "amqp://")
	if !ok {
		rest, ok = strings.CutPrefix(rawURL, "amqps://")
	}
	if !ok {
		return msg
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return msg
	}
	if _, pass, found := strings.Cut(rest[:at], ":"); found && pass != "" {
		return strings.ReplaceAll(msg, pass, "xxxxx")
	}
	return msg
}

// LandingBound implements [outbox.LandingBounder]: how long after
// Publish's context ends (or PublishTimeout passes) a message given to
// that Publish can still be routed to a queue. It is [Options.LandingBound]
// when set; else CloseTimeout + 2 x the negotiated heartbeat interval +
// 1s (2s + 6s + 1s = 9s with the defaults; heartbeat=0 in the URL takes the
// broker's interval, 60s by default), or [LandingUnbounded] for a
// connection without heartbeats. See the package documentation,
// "Deadlines", for why. It is fixed when the sink is built.
func (s *Sink) LandingBound() time.Duration { return s.landing }

// KeepsKeyOrder implements [outbox.KeyOrderer]; it reports true. See the
// package documentation, "Ordering", and keyorder.go.
func (s *Sink) KeepsKeyOrder() bool { return true }

// Ping reports whether the sink is connected, dialling again when the
// connection was lost (subject to the reconnect delay). It is meant for
// readiness checks.
func (s *Sink) Ping(ctx context.Context) error {
	_, err := s.session(ctx)
	return err
}

// Blocked reports whether the broker has blocked the sink's connection
// (connection.blocked, sent on a memory or disk alarm) and the reason it
// gave. While blocked, Publish holds its messages until the broker
// unblocks the connection or the publish's deadline passes (then they
// fail with [ErrBlocked], transient).
func (s *Sink) Blocked() (reason string, blocked bool) {
	s.mu.Lock()
	sess := s.sess
	s.mu.Unlock()
	if sess == nil {
		return "", false
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.blocked, sess.blocked != ""
}

// Close closes the connection; the messages not yet confirmed fail. Publish
// after Close fails every message with an error wrapping
// [outbox.ErrClosed]. Close is idempotent and safe for concurrent use.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closedCh)
	sess := s.sess
	s.sess = nil
	s.mu.Unlock()
	if sess != nil {
		sess.close(s.opts.CloseTimeout)
	}
	return nil
}

// errClosed is what Publish and Ping return after Close.
var errClosed = fmt.Errorf("amqpsink: the sink is closed: %w", outbox.ErrClosed)

// session returns the live connection. When it was lost, it starts a new
// connection attempt (in the background, no sooner than the reconnect
// delay after the last failed one) unless one is under way, and waits for
// it or for ctx: a failed attempt's error comes back as is.
func (s *Sink) session(ctx context.Context) (*session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if s.sess != nil && !s.sess.isDead() {
		defer s.mu.Unlock()
		return s.sess, nil
	}
	if s.dialing == nil {
		s.dialing = make(chan struct{})
		go s.redial(time.Until(s.nextDial), s.dialing)
	}
	dialing, lastErr := s.dialing, s.dialErr
	s.mu.Unlock()
	select {
	case <-dialing:
	case <-ctx.Done():
		if lastErr == nil {
			lastErr = errors.New("the connection was lost")
		}
		return nil, fmt.Errorf("amqpsink: not connected to %s, reconnecting (last error: %w): %w", s.url, lastErr, ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, errClosed
	case s.sess != nil && !s.sess.isDead():
		return s.sess, nil
	case s.dialErr != nil:
		return nil, s.dialErr
	}
	return nil, fmt.Errorf("%w: the new connection to %s closed at once", ErrConnectionLost, s.url)
}

// redial waits for wait, then dials, and records the outcome: a failed
// attempt doubles the delay before the next one.
func (s *Sink) redial(wait time.Duration, done chan struct{}) {
	defer close(done)
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.closedCh:
			s.mu.Lock()
			s.dialing = nil
			s.mu.Unlock()
			return
		}
	}
	sess, err := s.dial()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialing = nil
	switch {
	case err != nil:
		s.dialErr = err
		s.nextDial = time.Now().Add(s.dialDelay)
		s.dialDelay = min(2*s.dialDelay, s.opts.MaxReconnectDelay)
	case s.closed:
		go sess.close(s.opts.CloseTimeout)
	default:
		s.sess, s.dialErr, s.nextDial, s.dialDelay = sess, nil, time.Time{}, s.opts.ReconnectDelay
	}
}

// dial opens a connection, keeping hold of its TCP connection so that it
// can be dropped without waiting for the broker.
func (s *Sink) dial() (*session, error) {
	sess := &session{dead: make(chan struct{}), unblocked: make(chan struct{})}
	close(sess.unblocked)
	cfg := s.cfg
	inner := cfg.Dial
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		var c net.Conn
		var err error
		if inner != nil {
			c, err = inner(network, addr)
		} else {
			c, err = net.DialTimeout(network, addr, DefaultDialTimeout)
			if err == nil {
				err = c.SetDeadline(time.Now().Add(DefaultDialTimeout))
			}
		}
		if err != nil {
			return nil, err
		}
		sess.raw = c
		return c, nil
	}
	conn, err := amqp.DialConfig(s.dialURL, cfg)
	if err != nil {
		if msg := scrub(err.Error(), s.dialURL); msg != err.Error() {
			return nil, fmt.Errorf("amqpsink: connecting to %s: %s", s.url, msg)
		}
		return nil, fmt.Errorf("amqpsink: connecting to %s: %w", s.url, err)
	}
	sess.conn = conn
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go sess.watch(closes, blocks)
	return sess, nil
}

// session is one connection and what the sink knows of its state.
type session struct {
	conn    *amqp.Connection
	raw     net.Conn
	dead    chan struct{} // closed when the connection is closed
	aborted atomic.Bool   // dropped by the sink: dead, whether or not the client noticed yet

	mu        sync.Mutex
	err       error         // why the connection closed
	blocked   string        // the reason of connection.blocked, while blocked
	unblocked chan struct{} // closed while not blocked
}

func (c *session) isDead() bool {
	if c.aborted.Load() {
		return true
	}
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// watch follows connection.blocked/unblocked and the connection's end.
func (c *session) watch(closes chan *amqp.Error, blocks chan amqp.Blocking) {
	for {
		select {
		case b := <-blocks:
			c.mu.Lock()
			switch {
			case b.Active && c.blocked == "":
				c.blocked = b.Reason
				c.unblocked = make(chan struct{})
			case !b.Active && c.blocked != "":
				c.blocked = ""
				close(c.unblocked)
			}
			c.mu.Unlock()
		case e := <-closes:
			c.mu.Lock()
			if e != nil {
				c.err = e
			} else {
				c.err = amqp.ErrClosed
			}
			if c.blocked != "" {
				c.blocked = ""
				close(c.unblocked)
			}
			c.mu.Unlock()
			close(c.dead)
			return
		}
	}
}

// waitUnblocked waits until the broker lets the connection publish (a
// connection.blocked, sent on a memory or disk alarm, holds every
// publish), the connection ends, or ctx does.
func (c *session) waitUnblocked(ctx context.Context) error {
	c.mu.Lock()
	ch, reason := c.unblocked, c.blocked
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	default:
	}
	select {
	case <-ch:
		return nil
	case <-c.dead:
		return nil // the publish fails with the connection's error
	case <-ctx.Done():
		return fmt.Errorf("%w (reason %q): the broker holds publishes until its memory or disk alarm clears; %w", ErrBlocked, reason, ctx.Err())
	}
}

// abort drops the TCP connection at once: the broker can no longer send a
// confirm for it, and the client stops writing to it.
func (c *session) abort() {
	c.aborted.Store(true)
	if c.raw == nil {
		return
	}
	// A reset, not a FIN: the bytes not yet sent are dropped instead of
	// being delivered after Publish gave up on them.
	if tc, ok := c.raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.raw.Close()
}

// close closes the connection politely, or drops it after timeout.
func (c *session) close(timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		_ = c.conn.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		c.abort()
		<-done
	}
}
