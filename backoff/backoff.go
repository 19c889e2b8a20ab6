// Package backoff computes retry delays for failed deliveries and classifies
// failures.
//
// A failure has a [Class]: transient failures (a broker hiccup) are retried
// soon, semi-transient ones (timeouts, an unreachable broker) are retried
// with longer delays, and permanent ones (a message too large, an unknown
// topic, a denied write) are never retried: the relay parks the entry at
// once. A sink marks an error's class with [Permanent], [SemiTransient] or
// [Transient]; [ClassOf] reads it back (unmarked errors are transient).
//
// A [Policy] turns an attempt count and a class into a delay: capped
// exponential growth with full jitter above a floor, so a failing entry
// never hot-loops and retries of many entries spread out instead of
// arriving together. The relay scales delays up under backpressure (an
// open circuit breaker) through the scale argument of [Policy.Delay].
package backoff

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Class is how a failure should be retried.
type Class int

// The failure classes, from mildest to worst.
const (
	// ClassTransient failures are retried with the policy's normal delays.
	ClassTransient Class = iota
	// ClassSemiTransient failures (timeouts, unreachable brokers) are retried
	// with delays multiplied by Policy.SemiTransientFactor.
	ClassSemiTransient
	// ClassPermanent failures are not retried: the entry is parked at once.
	ClassPermanent
)

// String returns "transient", "semi-transient" or "permanent".
func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassSemiTransient:
		return "semi-transient"
	case ClassPermanent:
		return "permanent"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Classifier is implemented by errors that know their class. [ClassOf]
// finds it anywhere in an error's chain.
type Classifier interface {
	FailureClass() Class
}

type classified struct {
	err   error
	class Class
}

func (e *classified) Error() string       { return e.err.Error() }
func (e *classified) Unwrap() error       { return e.err }
func (e *classified) FailureClass() Class { return e.class }

// Mark returns err marked with class c; nil stays nil.
func Mark(err error, c Class) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: c}
}

// Permanent marks err as permanent: the relay parks the entry at once.
func Permanent(err error) error { return Mark(err, ClassPermanent) }

// SemiTransient marks err as semi-transient: retried with longer delays.
func SemiTransient(err error) error { return Mark(err, ClassSemiTransient) }

// Transient marks err as transient. Unmarked errors are transient already;
// this overrides a class marked deeper in the chain.
func Transient(err error) error { return Mark(err, ClassTransient) }

// ClassOf returns the class of err: the outermost [Classifier] in its chain;
// else SemiTransient for context.DeadlineExceeded (a timeout); else
// Transient. ClassOf(nil) is Transient.
func ClassOf(err error) Class {
	var c Classifier
	if errors.As(err, &c) {
		return c.FailureClass()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ClassSemiTransient
	}
	return ClassTransient
}

// Policy computes retry delays. The zero value is usable: every zero field
// takes its documented default.
type Policy struct {
	// Base is the delay ceiling of the first retry. Default 500ms.
	Base time.Duration
	// Max caps every delay ceiling. Default 5m.
	Max time.Duration
	// Multiplier grows the ceiling per attempt. Default 2.
	Multiplier float64
	// Min is the floor of every delay, so full jitter never produces a hot
	// loop. Default Base/10, at least 10ms; it never exceeds the ceiling.
	Min time.Duration
	// SemiTransientFactor multiplies the ceiling of semi-transient
	// failures. Default 4.
	SemiTransientFactor float64
	// MaxAttempts is how many failed attempts an entry may have before it
	// is parked. Default 20; negative means unlimited.
	MaxAttempts int
	// Rand returns a uniform number in [0, 1). Default math/rand/v2's
	// Float64. Tests inject a fixed source for deterministic delays.
	Rand func() float64
}

func (p Policy) withDefaults() Policy {
	if p.Base <= 0 {
		p.Base = 500 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 5 * time.Minute
	}
	if p.Max < p.Base {
		p.Max = p.Base
	}
	if p.Multiplier < 1 {
		p.Multiplier = 2
	}
	if p.Min <= 0 {
		p.Min = max(p.Base/10, 10*time.Millisecond)
	}
	if p.SemiTransientFactor < 1 {
		p.SemiTransientFactor = 4
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 20
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	return p
}

// Validate reports a setting that cannot work: a negative duration, or a
// Min above Max.
func (p Policy) Validate() error {
	switch {
	case p.Base < 0 || p.Max < 0 || p.Min < 0:
		return errors.New("backoff: Base, Max and Min must not be negative")
	case p.Min > 0 && p.Max > 0 && p.Min > p.Max:
		return fmt.Errorf("backoff: Min (%v) is above Max (%v)", p.Min, p.Max)
	case p.Multiplier < 0 || p.SemiTransientFactor < 0:
		return errors.New("backoff: Multiplier and SemiTransientFactor must not be negative")
	}
	return nil
}

// Ceiling is the largest delay before retry number attempt (1 for the first
// retry) of a failure of class c, before jitter and scaling:
// min(Max, Base × Multiplier^(attempt-1)), times SemiTransientFactor for
// semi-transient failures (still capped by Max).
func (p Policy) Ceiling(attempt int, c Class) time.Duration {
	p = p.withDefaults()
	if attempt < 1 {
		attempt = 1
	}
	d := float64(p.Base) * math.Pow(p.Multiplier, float64(attempt-1))
	if c == ClassSemiTransient {
		d *= p.SemiTransientFactor
	}
	if d > float64(p.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.Max
	}
	return time.Duration(d)
}

// Delay returns the delay before retry number attempt of a failure of
// class c: a uniform random duration in [Min, Ceiling) (full jitter with a
// floor), multiplied by scale (values below 1 count as 1; the relay passes
// its backpressure factor) and capped at Max×scale.
func (p Policy) Delay(attempt int, c Class, scale float64) time.Duration {
	p = p.withDefaults()
	ceil := p.Ceiling(attempt, c)
	floor := min(p.Min, ceil)
	d := floor + time.Duration(p.Rand()*float64(ceil-floor))
	if scale > 1 {
		d = time.Duration(float64(d) * scale)
	}
	return d
}

// Exhausted reports whether an entry that has now failed attempts times must
// be parked because it reached MaxAttempts.
func (p Policy) Exhausted(attempts int) bool {
	p = p.withDefaults()
	return p.MaxAttempts > 0 && attempts >= p.MaxAttempts
}

// Decide is the whole retry decision for an entry that just failed with err
// and has now failed attempts times: park it (a permanent failure, or
// attempts reached MaxAttempts) or retry it after the returned delay.
func (p Policy) Decide(attempts int, err error, scale float64) (park bool, delay time.Duration) {
	c := ClassOf(err)
	if c == ClassPermanent || p.Exhausted(attempts) {
		return true, 0
	}
	return false, p.Delay(attempts, c, scale)
}
