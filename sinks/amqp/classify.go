package amqpsink

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox/backoff"
)

// Errors the sink's publish errors wrap, for errors.Is.
var (
	// ErrUnroutable: the broker returned the message (basic.return, 312
	// NO_ROUTE): no queue is bound to its exchange for its routing key,
	// and the exchange has no alternate exchange. Permanent.
	ErrUnroutable = errors.New("amqpsink: message unroutable")
	// ErrNacked: the broker refused the message (basic.nack). Transient.
	ErrNacked = errors.New("amqpsink: message refused by the broker (basic.nack)")
	// ErrConnectionLost: the channel or connection closed before the broker
	// confirmed the message, which may or may not have been written.
	// Transient.
	ErrConnectionLost = errors.New("amqpsink: channel or connection closed before the broker confirmed the message")
	// ErrBlocked: the broker blocked the connection (connection.blocked,
	// on a memory or disk alarm) for longer than the publish could wait.
	// Transient.
	ErrBlocked = errors.New("amqpsink: the broker blocked the connection")
)

// Classify returns the class of a publish error, the default of
// [Options.Classify]. An error already marked with a class (backoff.Mark)
// keeps it. Otherwise:
//
//   - permanent: [ErrUnroutable] and the channel errors that close a
//     channel on one message: 404 NOT_FOUND (no such exchange), 403
//     ACCESS_REFUSED (the user may not write to the exchange), 406
//     PRECONDITION_FAILED (over the broker's max_message_size), and the
//     other AMQP errors a broker raises on a bad publish (502
//     SYNTAX_ERROR, 503 COMMAND_INVALID, 530 NOT_ALLOWED, 540
//     NOT_IMPLEMENTED);
//   - semi-transient: context.DeadlineExceeded (no confirm in time);
//   - transient: everything else, among them [ErrConnectionLost],
//     [ErrNacked], [ErrBlocked], a connection closed or refused, 320
//     CONNECTION_FORCED (a broker shutting down or an operator closing
//     the connection), 541 INTERNAL_ERROR, context.Canceled.
//
// The sink only hands the permanent AMQP errors to the messages they are
// about (the one that named the missing exchange, the one over the size
// limit): the other messages pending on a channel that closed fail with
// [ErrConnectionLost].
func Classify(err error) backoff.Class {
	var c backoff.Classifier
	switch {
	case err == nil:
		return backoff.ClassTransient
	case errors.As(err, &c):
		return c.FailureClass()
	case errors.Is(err, ErrUnroutable):
		return backoff.ClassPermanent
	case errors.Is(err, ErrConnectionLost), errors.Is(err, ErrNacked), errors.Is(err, ErrBlocked):
		return backoff.ClassTransient
	case errors.Is(err, context.DeadlineExceeded):
		return backoff.ClassSemiTransient
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.NotFound, amqp.AccessRefused, amqp.PreconditionFailed,
			amqp.SyntaxError, amqp.CommandInvalid, amqp.NotAllowed, amqp.NotImplemented:
			return backoff.ClassPermanent
		}
	}
	return backoff.ClassTransient
}

// unroutable is the error of a message the broker returned.
func unroutable(r *amqp.Return) error {
	return fmt.Errorf("%w: exchange %q routed it with routing key %q to no queue (%d %s); bind a queue to the exchange for that routing key, or give the exchange an alternate exchange (the alternate-exchange argument or policy), then requeue the parked entry",
		ErrUnroutable, r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)
}

var (
	noExchange = regexp.MustCompile(`no exchange '([^']*)'`)
	refusedTo  = regexp.MustCompile(`exchange '([^']*)'`)
	maxSize    = regexp.MustCompile(`larger than configured max size (\d+)`)
)

// closeError is the error of pending message p when its channel closed
// with why (exchangeOption names the option that maps exchanges) (nil: closed by the client, or with its connection): the
// channel error itself when it is about p (p's exchange is the missing or
// refused one, p is over the size limit), else [ErrConnectionLost].
func closeError(why *amqp.Error, p *pending, exchangeOption string) error {
	if why == nil {
		return fmt.Errorf("%w: entry %s (exchange %q, routing key %q); it may have been written, a duplicate on retry", ErrConnectionLost, p.id, p.exchange, p.key)
	}
	switch why.Code {
	case amqp.NotFound:
		if m := noExchange.FindStringSubmatch(why.Reason); m != nil && m[1] == p.exchange {
			return fmt.Errorf("amqpsink: entry %s: exchange %q does not exist; declare it (or map the entry's topic to an existing exchange with %s), then requeue the parked entry: %w", p.id, p.exchange, exchangeOption, why)
		}
	case amqp.AccessRefused:
		if m := refusedTo.FindStringSubmatch(why.Reason); m != nil && m[1] == p.exchange {
			return fmt.Errorf("amqpsink: entry %s: the broker refused access to exchange %q (the user may not write to it, or it is an internal exchange); grant the relay's user write permission on it (rabbitmqctl set_permissions), or map the topic to an exchange that is not internal with %s, then requeue the parked entry: %w", p.id, p.exchange, exchangeOption, why)
		}
	case amqp.PreconditionFailed:
		if m := maxSize.FindStringSubmatch(why.Reason); m != nil {
			if limit, err := strconv.Atoi(m[1]); err == nil && p.size > limit {
				return fmt.Errorf("amqpsink: entry %s: its payload (%d bytes) is over the broker's max_message_size (%d); shrink the payload or raise max_message_size in rabbitmq.conf, then requeue the parked entry: %w", p.id, p.size, limit, why)
			}
		}
	}
	return fmt.Errorf("%w: entry %s (exchange %q, routing key %q): the channel closed (%d %s); it may have been written, a duplicate on retry", ErrConnectionLost, p.id, p.exchange, p.key, why.Code, why.Reason)
}
