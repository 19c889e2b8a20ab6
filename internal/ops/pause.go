package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// ErrNoTarget and ErrTwoTargets are the errors of a [PauseSpec] that names
// no topic and no partition, or both: a front end says them with the
// names of its own inputs.
var (
	ErrNoTarget   = errors.New("ops: name a topic or a partition to pause or resume")
	ErrTwoTargets = errors.New("ops: name a topic or a partition, not both")
)

// PauseSpec is what an operator names to pause or resume, as written: a
// topic, or a partition number. An empty field is not given.
type PauseSpec struct {
	Topic     string
	Partition string
}

// PauseTarget is a parsed [PauseSpec]: a topic, or (when Topic is "") a
// partition.
type PauseTarget struct {
	Topic     string
	Partition int
}

// IsTopic reports whether t is a topic.
func (t PauseTarget) IsTopic() bool { return t.Topic != "" }

// String names t for people: `topic "orders"` or `partition 3`.
func (t PauseTarget) String() string {
	if t.IsTopic() {
		return "topic " + strconv.Quote(t.Topic)
	}
	return "partition " + strconv.Itoa(t.Partition)
}

// ParsePauseTarget checks s against an outbox of partitions partitions.
// It returns [ErrNoTarget] or [ErrTwoTargets] when s names neither or
// both, and a [*FieldError] for [FieldPartition] when the partition is not
// a number in [0, partitions).
func ParsePauseTarget(s PauseSpec, partitions int) (PauseTarget, error) {
	switch {
	case s.Topic == "" && s.Partition == "":
		return PauseTarget{}, ErrNoTarget
	case s.Topic != "" && s.Partition != "":
		return PauseTarget{}, ErrTwoTargets
	case s.Topic != "":
		return PauseTarget{Topic: s.Topic}, nil
	}
	p, err := strconv.Atoi(strings.TrimSpace(s.Partition))
	if err != nil {
		return PauseTarget{}, &FieldError{Field: FieldPartition, Err: fmt.Errorf("%q is not a partition number: write a number from 0 to %d", s.Partition, partitions-1)}
	}
	if p < 0 || p >= partitions {
		return PauseTarget{}, &FieldError{Field: FieldPartition, Err: fmt.Errorf("%d is out of range: the outbox has partitions 0 to %d", p, partitions-1)}
	}
	return PauseTarget{Partition: p}, nil
}

// PauseChange is what a [Pause] or [Resume] did.
type PauseChange struct {
	Target PauseTarget
	// Changed is false when the target already was as asked (paused for
	// Pause, not paused for Resume).
	Changed bool
	// Since is when the target was paused, by the store's clock: after
	// Pause, since when it is paused (kept from before when it already
	// was); after Resume, since when it had been paused (zero when it was
	// not).
	Since time.Time
	// Paused is everything paused after the change.
	Paused outbox.Paused
}

// Pause pauses t, reading what is paused before and after so that it can
// report what changed. Store errors are returned as they are.
func Pause(ctx context.Context, p outbox.Pauser, t PauseTarget) (PauseChange, error) {
	return change(ctx, p, t, true)
}

// Resume resumes t, reporting what changed as [Pause] does. Store errors
// are returned as they are.
func Resume(ctx context.Context, p outbox.Pauser, t PauseTarget) (PauseChange, error) {
	return change(ctx, p, t, false)
}

func change(ctx context.Context, p outbox.Pauser, t PauseTarget, pause bool) (PauseChange, error) {
	before, err := p.Paused(ctx)
	if err != nil {
		return PauseChange{}, err
	}
	was, wasSince := PausedSince(before, t)
	switch {
	case pause && t.IsTopic():
		err = p.PauseTopic(ctx, t.Topic)
	case pause:
		err = p.PausePartition(ctx, t.Partition)
	case t.IsTopic():
		err = p.ResumeTopic(ctx, t.Topic)
	default:
		err = p.ResumePartition(ctx, t.Partition)
	}
	if err != nil {
		return PauseChange{}, err
	}
	after, err := p.Paused(ctx)
	if err != nil {
		return PauseChange{}, err
	}
	c := PauseChange{Target: t, Changed: was != pause, Since: wasSince, Paused: after}
	if pause {
		_, c.Since = PausedSince(after, t)
	}
	return c, nil
}

// PausedSince reports whether p holds t, and since when.
func PausedSince(p outbox.Paused, t PauseTarget) (bool, time.Time) {
	if t.IsTopic() {
		for _, pt := range p.Topics {
			if pt.Topic == t.Topic {
				return true, pt.Since
			}
		}
		return false, time.Time{}
	}
	for _, pp := range p.Partitions {
		if pp.Partition == t.Partition {
			return true, pp.Since
		}
	}
	return false, time.Time{}
}
