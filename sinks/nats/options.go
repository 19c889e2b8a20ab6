package natssink

import (
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// Header names the sink sets on every message unless [Options] name others.
const (
	// DefaultIDHeader carries the entry ID (Nats-Msg-Id carries it too).
	DefaultIDHeader = "outbox-id"
	// DefaultKeyHeader carries the entry's Key (absent when Key is empty).
	DefaultKeyHeader = "outbox-key"
)

// Defaults of [Options] and of the connection [Dial] builds. With them a
// sink Dial builds reports a [Sink.LandingBound] of 5s + 5s = 10s, which
// fits the relay's default LeaseTTL (30s) less its RenewMargin (10s).
const (
	// DefaultPublishTimeout is the default of Options.PublishTimeout.
	DefaultPublishTimeout = 5 * time.Second
	// DefaultMaxPending is the default of Options.MaxPending.
	DefaultMaxPending = 4096
	// dialFlusherTimeout (nats.go: 1m) bounds one write of the
	// connection's buffered messages to the socket: a write that blocks
	// longer (a server that stopped reading) closes the connection, and
	// what was not written is dropped, never sent later. It is part of
	// the landing bound.
	dialFlusherTimeout = 5 * time.Second
	// dialReconnectWait (nats.go: 2s) is the pause between reconnect
	// attempts to one server: a restarted server is found again within
	// about this long.
	dialReconnectWait = 250 * time.Millisecond
)

// Options configures a [Sink]. The zero value is usable: every zero field
// takes its documented default.
type Options struct {
	// Subject maps an entry to the NATS subject its message is published
	// to, which a JetStream stream must capture. Default: the entry's
	// Topic. An entry that maps to "" or to a subject that is not a
	// valid literal subject (empty tokens, whitespace, or a wildcard
	// token "*" or ">") fails permanently, with a reason naming this
	// option.
	Subject func(outbox.Entry) string

	// IDHeader is the message header that carries the entry ID, for
	// consumers to deduplicate by. Default [DefaultIDHeader]
	// ("outbox-id"). The JetStream header Nats-Msg-Id carries the entry
	// ID as well, whatever this is: it is what the stream's duplicate
	// window deduplicates by. An entry header of the same name is
	// dropped.
	IDHeader string

	// KeyHeader is the message header that carries the entry's Key (NATS
	// messages have no key of their own). Default [DefaultKeyHeader]
	// ("outbox-key"); entries with an empty Key get no such header. An
	// entry header of the same name is dropped.
	KeyHeader string

	// PublishTimeout bounds one Publish call and how long the sink waits
	// for the acknowledgement of one message: messages not acknowledged
	// by then fail with a semi-transient error (the server is
	// unreachable or slow, or the stream has no leader), and may still
	// be stored later, as a duplicate the stream's duplicate window
	// drops. Default [DefaultPublishTimeout] (5s); it must not be
	// negative. It is part of [Sink.LandingBound].
	PublishTimeout time.Duration

	// MaxPending is the most messages of this sink published and not yet
	// acknowledged or failed, over all concurrent Publish calls (the
	// JetStream context's PublishAsyncMaxPending too). Publish waits for a
	// free slot before it publishes a message. Default
	// [DefaultMaxPending] (4096); it must not be negative.
	MaxPending int

	// Classify decides the class of a publish error. Default [Classify].
	Classify func(error) backoff.Class

	// OptionName gives the name under which the sink's messages (the
	// errors Publish returns, which the relay logs and keeps as parked
	// reasons, and the errors of New and Dial) refer to an option, given
	// its Go name, a field of Options ("Subject", "PublishTimeout", ...).
	// A program that sets the options from its own flags sets it to name
	// those; an answer of "" keeps the default. Default: the Go name,
	// "Options.Subject".
	OptionName func(option string) string

	// LandingBound declares how long after Publish returns a message it
	// published can still be stored, and is what [Sink.LandingBound] then
	// reports instead of the bound it computes from the connection's
	// options. Default 0: computed. Negative values are rejected.
	LandingBound time.Duration

	// Now is the sink's clock, read for [Sink.Failing]. Default time.Now.
	Now func() time.Time
}

// name is how the sink's messages refer to option, a field of Options.
func (o Options) name(option string) string {
	if o.OptionName != nil {
		if n := o.OptionName(option); n != "" {
			return n
		}
	}
	return "Options." + option
}

func (o Options) validate() error {
	switch {
	case o.LandingBound < 0:
		return fmt.Errorf("natssink: %s is %v; declare a positive bound, or leave it 0 to have it computed", o.name("LandingBound"), o.LandingBound)
	case o.PublishTimeout < 0:
		return fmt.Errorf("natssink: %s is %v; set a positive timeout, or leave it 0 for %v (it bounds how long an acknowledgement is awaited, and so the landing bound)", o.name("PublishTimeout"), o.PublishTimeout, DefaultPublishTimeout)
	case o.MaxPending < 0:
		return fmt.Errorf("natssink: %s is %d; set a positive number, or leave it 0 for %d", o.name("MaxPending"), o.MaxPending, DefaultMaxPending)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.IDHeader == "" {
		o.IDHeader = DefaultIDHeader
	}
	if o.KeyHeader == "" {
		o.KeyHeader = DefaultKeyHeader
	}
	if o.PublishTimeout == 0 {
		o.PublishTimeout = DefaultPublishTimeout
	}
	if o.MaxPending == 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.Classify == nil {
		o.Classify = Classify
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Subject == nil {
		o.Subject = func(e outbox.Entry) string { return e.Topic }
	}
	return o
}
