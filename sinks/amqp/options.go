package amqpsink

import (
	"fmt"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// DefaultIDHeader is the message header that carries the entry ID unless
// [Options.IDHeader] names another. The message's message_id property
// carries it too.
const DefaultIDHeader = "outbox-id"

// Defaults of [Options]. With them a sink reports a landing bound of
// DefaultCloseTimeout + landingMargin = 3s (see [Sink.LandingBound]).
const (
	DefaultPublishTimeout = 5 * time.Second
	DefaultCloseTimeout   = 2 * time.Second
	DefaultChannels       = 4
	DefaultMaxPending     = 4096
	// DefaultReconnectDelay is the first wait between failed connection
	// attempts; it doubles up to DefaultMaxReconnectDelay.
	DefaultReconnectDelay    = 100 * time.Millisecond
	DefaultMaxReconnectDelay = 5 * time.Second
	// DefaultDialTimeout bounds the TCP connect and the AMQP (and TLS)
	// handshake of one connection attempt.
	DefaultDialTimeout = 5 * time.Second
)

// Options configures a [Sink]. The zero value is usable: every zero field
// takes its documented default.
type Options struct {
	// Exchange maps an entry to the exchange its message is published to.
	// Default: the entry's Topic. "" is the default exchange, which routes
	// a message to the queue named by its routing key.
	Exchange func(outbox.Entry) string

	// RoutingKey maps an entry to its routing key. Default: the entry's
	// Key, or RoutingKeyTemplate when set. Setting both is an error.
	RoutingKey func(outbox.Entry) string

	// RoutingKeyTemplate builds the routing key from a template in which
	// {topic}, {key} and {id} stand for the entry's Topic, Key and ID,
	// for example "{topic}.{key}". Default "": the routing key is the
	// entry's Key (or what RoutingKey returns).
	RoutingKeyTemplate string

	// IDHeader is the message header that carries the entry ID, for
	// consumers to deduplicate by (message_id carries it too). Default
	// [DefaultIDHeader] ("outbox-id"). An entry header of the same name is
	// dropped.
	IDHeader string

	// PublishTimeout bounds one Publish call: the messages the broker has
	// not confirmed by then fail with a semi-transient error (wrapping
	// context.DeadlineExceeded). Default [DefaultPublishTimeout] (5s);
	// negative means only Publish's context bounds it.
	PublishTimeout time.Duration

	// CloseTimeout is how long Publish, having given up on unconfirmed
	// messages (its context ended or PublishTimeout passed), waits for
	// the broker to close their channel before it drops the whole
	// connection. It is what bounds how long such a message can still
	// land (see [Sink.LandingBound]). Default [DefaultCloseTimeout] (2s).
	CloseTimeout time.Duration

	// Channels is the number of AMQP channels publishing in parallel on
	// the sink's connection. An entry's channel is chosen by a hash of its
	// Topic and Key (of its ID when it has no key), so a key always
	// publishes on one channel. Default [DefaultChannels] (4).
	Channels int

	// MaxPending is the most messages published and not yet confirmed,
	// across the sink's channels; Publish waits for room beyond it.
	// Default [DefaultMaxPending] (4096).
	MaxPending int

	// ReconnectDelay is the wait after a failed connection attempt before
	// the next one; it doubles after each failure up to MaxReconnectDelay.
	// Publish calls in between fail at once (transient) with the last
	// connection error. Defaults [DefaultReconnectDelay] (100ms) and
	// [DefaultMaxReconnectDelay] (5s).
	ReconnectDelay    time.Duration
	MaxReconnectDelay time.Duration

	// Classify decides the class of a publish error. Default [Classify].
	Classify func(error) backoff.Class

	// LandingBound declares how long after Publish gave up on a message it
	// can still be written, and is what [Sink.LandingBound] reports
	// instead of the bound computed from CloseTimeout. Default 0:
	// computed. Negative values are rejected.
	LandingBound time.Duration

	// Now is the sink's clock, read for [Sink.Failing]. Default time.Now.
	Now func() time.Time

	// OptionName gives the name under which the sink's messages refer to
	// an option, given its Go name (a field of Options: "Channels",
	// "PublishTimeout", ...). A program that sets the options from its own
	// flags sets it to name those; an answer of "" keeps the default.
	// Default: "Options." followed by the Go name.
	OptionName func(option string) string
}

// name is how the sink's messages refer to option.
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
		return fmt.Errorf("amqpsink: %s is %v; declare a positive bound, or leave it 0 to have it computed", o.name("LandingBound"), o.LandingBound)
	case o.RoutingKey != nil && o.RoutingKeyTemplate != "":
		return fmt.Errorf("amqpsink: both %s and %s are set; set one of them", o.name("RoutingKey"), o.name("RoutingKeyTemplate"))
	case o.Channels < 0:
		return fmt.Errorf("amqpsink: %s is %d; set a positive number of channels, or 0 for the default (%d)", o.name("Channels"), o.Channels, DefaultChannels)
	case o.MaxPending < 0:
		return fmt.Errorf("amqpsink: %s is %d; set a positive number, or 0 for the default (%d)", o.name("MaxPending"), o.MaxPending, DefaultMaxPending)
	case o.CloseTimeout < 0:
		return fmt.Errorf("amqpsink: %s is %v; set a positive duration, or 0 for the default (%v)", o.name("CloseTimeout"), o.CloseTimeout, DefaultCloseTimeout)
	case o.ReconnectDelay < 0 || o.MaxReconnectDelay < 0:
		return fmt.Errorf("amqpsink: %s and %s must not be negative; leave them 0 for the defaults", o.name("ReconnectDelay"), o.name("MaxReconnectDelay"))
	}
	if t := o.RoutingKeyTemplate; t != "" && !strings.Contains(t, "{") {
		return fmt.Errorf("amqpsink: %s %q has no placeholder; use {topic}, {key} or {id}", o.name("RoutingKeyTemplate"), t)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.IDHeader == "" {
		o.IDHeader = DefaultIDHeader
	}
	if o.PublishTimeout == 0 {
		o.PublishTimeout = DefaultPublishTimeout
	}
	if o.CloseTimeout == 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
	if o.Channels == 0 {
		o.Channels = DefaultChannels
	}
	if o.MaxPending == 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.ReconnectDelay == 0 {
		o.ReconnectDelay = DefaultReconnectDelay
	}
	if o.MaxReconnectDelay == 0 {
		o.MaxReconnectDelay = DefaultMaxReconnectDelay
	}
	if o.Classify == nil {
		o.Classify = Classify
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Exchange == nil {
		o.Exchange = func(e outbox.Entry) string { return e.Topic }
	}
	if o.RoutingKey == nil {
		if t := o.RoutingKeyTemplate; t != "" {
			o.RoutingKey = func(e outbox.Entry) string {
				return strings.NewReplacer("{topic}", e.Topic, "{key}", e.Key, "{id}", e.ID).Replace(t)
			}
		} else {
			o.RoutingKey = func(e outbox.Entry) string { return e.Key }
		}
	}
	return o
}
