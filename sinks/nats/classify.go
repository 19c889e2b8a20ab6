package natssink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox/backoff"
)

// ErrNoStream means no JetStream stream captures the subject a message
// was published to: the server answered "no responders", and the
// JetStream API confirmed that no stream's subjects include it. [Classify]
// makes it permanent; the error names the subject and what to configure.
var ErrNoStream = errors.New("natssink: no JetStream stream captures the subject")

// JetStream API error codes the sink classifies (nats-server's errors.json).
const (
	codeMessageTooLarge = 10054 // JSStreamMessageExceedsMaximumErr: over the stream's MaxMsgSize
	codeHeaderTooLarge  = 10097 // JSStreamHeaderExceedsMaximumErr: headers over 64KiB
	codeStoreFailed     = 10077 // JSStreamStoreFailedF: the store refused the message, its text says why
	codeClusterNotAvail = 10008 // JSClusterNotAvailErr: JetStream temporarily unavailable
)

// storeLimits are the texts of a JSStreamStoreFailedF error for a message
// over a stream's limits with DiscardNew (nats-server's store.go).
var storeLimits = map[string]string{
	"maximum messages exceeded":             "MaxMsgs",
	"maximum bytes exceeded":                "MaxBytes",
	"maximum messages per subject exceeded": "MaxMsgsPerSubject",
	"message too large":                     "MaxMsgSize",
}

// Classify returns the class of a publish error, the default of
// [Options.Classify]:
//
//   - permanent: [ErrNoStream] (no stream captures the subject), a
//     message over the stream's limits (its MaxMsgSize, headers over
//     64KiB, or MaxMsgs, MaxBytes or MaxMsgsPerSubject reached with
//     DiscardNew: JetStream API errors 10054, 10097 and 10077 with those
//     texts), over the server's max_payload (nats.ErrMaxPayload), an
//     invalid subject (nats.ErrBadSubject) and a server without headers
//     (nats.ErrHeadersNotSupported);
//   - semi-transient: timeouts (context.DeadlineExceeded,
//     jetstream.ErrAsyncPublishTimeout, nats.ErrTimeout,
//     jetstream.ErrTooManyStalledMsgs), a closed connection
//     (nats.ErrConnectionClosed, nats.ErrNoServers) and network errors;
//   - transient: every other error, among them a connection lost or
//     reconnecting (nats.ErrDisconnected, nats.ErrReconnectBufExceeded,
//     nats.ErrConnectionReconnecting: a server restart), "no responders"
//     from a subject whose stream exists (its leader is being elected, or
//     the server is restarting), JetStream temporarily unavailable (10008),
//     other JetStream API errors, and context.Canceled.
//
// An error already marked with a class (backoff.Mark) keeps it.
func Classify(err error) backoff.Class {
	if err == nil {
		return backoff.ClassTransient
	}
	var c backoff.Classifier
	if errors.As(err, &c) {
		return c.FailureClass()
	}
	if permanentErr(err) {
		return backoff.ClassPermanent
	}
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrTooManyStalledMsgs),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrNoServers),
		errors.As(err, &ne), errors.As(err, &op),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return backoff.ClassSemiTransient
	}
	return backoff.ClassTransient
}

func permanentErr(err error) bool {
	if errors.Is(err, ErrNoStream) || errors.Is(err, nats.ErrMaxPayload) ||
		errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrHeadersNotSupported) {
		return true
	}
	_, over := overLimit(err)
	return over
}

// overLimit reports whether err is JetStream refusing a message over a
// stream's limits, and the name of the stream setting it is over.
func overLimit(err error) (setting string, ok bool) {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return "", false
	}
	switch api.ErrorCode {
	case codeMessageTooLarge:
		return "MaxMsgSize", true
	case codeHeaderTooLarge:
		return "headers (at most 64KiB)", true
	case codeStoreFailed:
		setting, ok = storeLimits[api.Description]
		return setting, ok
	}
	return "", false
}

// streamLookup is the answer of the JetStream API to "which stream
// captures this subject".
type streamLookup struct {
	name string
	err  error
}

// streamLookupTimeout bounds a lookup of the stream of a subject: a
// JetStream that does not answer within it is not available (restarting,
// or electing a leader), which is all the sink needs to know.
const streamLookupTimeout = time.Second

// stream looks up (once per call and subject) the stream that captures
// subj.
func (c *call) stream(subj string) streamLookup {
	if l, ok := c.streams[subj]; ok {
		return l
	}
	ctx, cancel := context.WithTimeout(c.pctx, streamLookupTimeout)
	defer cancel()
	name, err := c.s.js.StreamNameBySubject(ctx, subj)
	l := streamLookup{name, err}
	if c.streams == nil {
		c.streams = map[string]streamLookup{}
	}
	c.streams[subj] = l
	return l
}

// failure turns the error of entry i into the error Publish returns: with
// the entry, the subject, what happened and what to do, marked with its
// class. Errors the sink built itself, and the caller's context errors,
// come back as they are.
func (c *call) failure(i int, err error) error {
	var cl backoff.Classifier
	if errors.As(err, &cl) {
		return err
	}
	if ctxErr := c.ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return ctxErr
	}
	e, subj, o := &c.msgs[i], c.subjects[i], c.s.opts
	hint := ""
	switch setting, over := overLimit(err); {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		err, hint = c.noResponders(subj, err)
	case over:
		hint = fmt.Sprintf(" (the message is over the %s of stream %s: raise that limit (or set Discard: old) or shrink the entry, then requeue it)", setting, c.streamName(subj))
	case errors.Is(err, nats.ErrMaxPayload):
		hint = fmt.Sprintf(" (the message is over the server's max_payload of %d bytes, headers included: raise max_payload in the server's configuration or shrink the entry, then requeue it)", c.s.nc.MaxPayload())
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		// The JetStream context's timer (PublishTimeout from the
		// publish) fired before the call's own: the same timeout.
		return backoff.Mark(fmt.Errorf("%s: %w", o.notAcknowledged(e.ID), err), o.Classify(err))
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionReconnecting):
		hint = " (the connection to the server was lost; it reconnects, and the entry is published again: a copy the server stored is dropped by the stream's duplicate window)"
	}
	err = fmt.Errorf("natssink: publish entry %s to subject %q: %w%s", e.ID, subj, err, hint)
	if errors.Is(err, ErrNoStream) {
		err = fmt.Errorf("%w; create a stream whose subjects include %q, or map topic %q to a subject a stream captures with %s, then requeue the entry", err, subj, e.Topic, o.name("Subject"))
	}
	return backoff.Mark(err, o.Classify(err))
}

// noResponders explains "no responders" for subj: [ErrNoStream] when the
// JetStream API confirms no stream captures it, else a transient error.
func (c *call) noResponders(subj string, err error) (error, string) {
	l := c.stream(subj)
	switch {
	case errors.Is(l.err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%w %q (%w)", ErrNoStream, subj, err), ""
	case l.err == nil:
		return err, fmt.Sprintf(" (stream %s captures the subject but did not answer: its leader is being elected, or the server is restarting)", l.name)
	}
	return err, fmt.Sprintf(" (and asking JetStream which stream captures the subject failed: %v)", l.err)
}

// streamName names the stream that captures subj, for messages.
func (c *call) streamName(subj string) string {
	if l := c.stream(subj); l.err == nil {
		return fmt.Sprintf("%q", l.name)
	}
	return fmt.Sprintf("capturing subject %q", subj)
}
