package natssink

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/sinkhealth"
)

// Sink publishes outbox entries to NATS JetStream. It implements
// [outbox.Sink], [outbox.KeyOrderer] and [outbox.LandingBounder], and is
// safe for concurrent use.
type Sink struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	owned   bool // Close closes nc
	opts    Options
	landing time.Duration // what LandingBound reports

	// slots holds one token per message published and not yet answered
	// (acknowledged, failed or timed out), over all Publish calls: at most
	// MaxPending. The Publish call that sent a message gives its token
	// back when it has the answer; a message still unanswered when its
	// call returns gets a goroutine that gives the token back once the
	// answer comes (or the sink is closed).
	slots chan struct{}

	// closing is held for reading while a message is handed to nats.go,
	// and for writing by Close, so that nothing is published once Close
	// has begun.
	closing   sync.RWMutex
	closeOnce sync.Once
	closed    chan struct{}

	health sinkhealth.Health
}

var (
	_ outbox.Sink           = (*Sink)(nil)
	_ outbox.KeyOrderer     = (*Sink)(nil)
	_ outbox.LandingBounder = (*Sink)(nil)
)

// LandingUnbounded is what [Sink.LandingBound] reports when nothing bounds
// how long after Publish returns a message can still be stored. It is
// negative.
const LandingUnbounded time.Duration = -1

// New returns a sink that publishes through nc, with a JetStream context
// of its own. The connection stays the caller's: Close does not close it,
// and the caller may use it for anything else.
//
// The connection's options decide [Sink.LandingBound]: with nats.go's
// defaults it is [LandingUnbounded], because nats.go keeps what is
// published while it reconnects (up to ReconnectBufSize, 8MB) and sends it
// once connected again, however long after Publish gave up on it. Build
// the connection with nats.ReconnectBufSize(-1) (publishing while
// disconnected then fails at once, a transient error) and a positive
// nats.FlusherTimeout, as [Dial] does, for a finite bound.
func New(nc *nats.Conn, opts Options) (*Sink, error) {
	if nc == nil {
		return nil, errors.New("natssink: New needs a non-nil *nats.Conn")
	}
	return newSink(nc, false, opts)
}

func newSink(nc *nats.Conn, owned bool, opts Options) (*Sink, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if !nc.HeadersSupported() && nc.IsConnected() {
		return nil, errors.New("natssink: the server does not support message headers (nats-server 2.2 or later does); upgrade it")
	}
	opts = opts.withDefaults()
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(opts.MaxPending),
		jetstream.WithPublishAsyncTimeout(opts.PublishTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("natssink: %w", err)
	}
	s := &Sink{
		nc:     nc,
		js:     js,
		owned:  owned,
		opts:   opts,
		slots:  make(chan struct{}, opts.MaxPending),
		closed: make(chan struct{}),
	}
	s.landing = landingBound(opts, nc.Opts)
	return s, nil
}

// Dial returns a sink with its own connection to the servers in url (a
// comma-separated list of nats:// or tls:// URLs, as nats.Connect takes),
// built with nopts after these defaults (so nopts override them):
//
//   - nats.ReconnectBufSize(-1): nothing published while the connection
//     is down is kept to be sent after it reconnects (nats.go keeps up to
//     8MB by default, and sends it however late); such a publish fails at
//     once with a transient error, and the relay retries it. It is what
//     makes [Sink.LandingBound] finite;
//   - nats.FlusherTimeout(5s) (nats.go: 1m): a write to the socket that
//     blocks longer closes the connection, and what it did not write is
//     dropped, not sent later;
//   - nats.MaxReconnects(-1) and nats.ReconnectWait(250ms): reconnect for
//     as long as it takes, quickly, so a restarted server is found again
//     within about 250ms;
//   - nats.Name("outbox-relay").
//
// Close closes the connection. An error names the URL without its
// password.
func Dial(url string, opts Options, nopts ...nats.Option) (*Sink, error) {
	if strings.TrimSpace(url) == "" {
		return nil, errors.New("natssink: Dial needs a server URL (nats://host:4222)")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	base := []nats.Option{
		nats.ReconnectBufSize(-1),
		nats.FlusherTimeout(dialFlusherTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(dialReconnectWait),
		nats.Name("outbox-relay"),
	}
	nc, err := nats.Connect(url, append(base, nopts...)...)
	if err != nil {
		return nil, fmt.Errorf("natssink: connect to %s: %w; check that nats-server runs there (with -js) and the URL", redactURLs(url), err)
	}
	s, err := newSink(nc, true, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return s, nil
}

// redactURLs returns the comma-separated URLs of list with their
// passwords (and tokens: a user without a password) replaced by "xxxxx".
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := url.Parse(p)
		if err != nil {
			if strings.Contains(p, "@") {
				parts[i] = "(a URL that does not parse)"
			}
			continue
		}
		if u.User != nil {
			if _, has := u.User.Password(); !has {
				u.User = url.User("xxxxx") // a token
			}
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}

// landingBound is what LandingBound reports for a sink with opts (defaults
// applied) on a connection with copts.
func landingBound(opts Options, copts nats.Options) time.Duration {
	switch {
	case opts.LandingBound > 0:
		return opts.LandingBound
	case copts.ReconnectBufSize >= 0, copts.FlusherTimeout <= 0:
		// Buffered while reconnecting and sent whenever it reconnects, or
		// a write that may block for ever.
		return LandingUnbounded
	}
	return copts.FlusherTimeout + opts.PublishTimeout
}

// LandingBound implements [outbox.LandingBounder]: how long after Publish
// returns (its context ended, or PublishTimeout passed) a message it
// published can still be stored in a stream, or [LandingUnbounded]. It is
// fixed when the sink is built. See the package documentation, "Deadlines",
// for the reasoning. In order:
//
//   - [Options.LandingBound], when set;
//   - [LandingUnbounded] when the connection buffers what is published
//     while it reconnects (its ReconnectBufSize is not -1: nats.go's
//     default) or has no FlusherTimeout;
//   - otherwise FlusherTimeout + PublishTimeout: 5s + 5s = 10s with
//     Dial's defaults.
func (s *Sink) LandingBound() time.Duration { return s.landing }

// KeepsKeyOrder implements [outbox.KeyOrderer] and reports true: Publish
// publishes no entry of a key before the previous entry of that key in the
// call was acknowledged, or failed with a permanent error (after a
// retryable failure the key's later entries of the call fail without
// being sent). Entries of different keys, and entries without a key, are
// published concurrently.
func (s *Sink) KeepsKeyOrder() bool { return true }

// Conn returns the sink's connection: the one given to [New], or the one
// [Dial] built.
func (s *Sink) Conn() *nats.Conn { return s.nc }

// Ping makes one round trip to the JetStream API (an account info
// request), for a readiness check: nil means the server answered and
// JetStream is enabled for the account. It is bounded by ctx, or by
// PublishTimeout when ctx has no deadline.
func (s *Sink) Ping(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.PublishTimeout)
		defer cancel()
	}
	if _, err := s.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("natssink: ping %s: %w; check that nats-server runs there with JetStream enabled for the account (-js)", s.serverName(), err)
	}
	return nil
}

// serverName is the URL of the server the connection uses, without its
// password, or "the NATS server" when it has none.
func (s *Sink) serverName() string {
	if u := s.nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	return "the NATS server"
}

// Close stops the sink: its JetStream publisher is cleaned up (messages
// still awaiting an acknowledgement fail), and the connection [Dial]
// built is closed (a connection given to [New] stays open). Publish calls
// under way fail their entries not acknowledged yet, and Publish after
// Close fails every entry (transient), publishing nothing. Close is
// idempotent and returns nil.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		s.closing.Lock()
		close(s.closed)
		s.closing.Unlock()
		s.js.CleanupPublisher()
		if s.owned {
			s.nc.Close()
		}
	})
	return nil
}
