package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxrelay/outbox"
)

// Requeuer is the requeue half of [outbox.Inspector], which is all
// [Requeue] needs.
type Requeuer interface {
	Requeue(ctx context.Context, ids ...string) (int, error)
}

// RequeueOptions shape one [Requeue].
type RequeueOptions struct {
	// Batch is how many IDs one Requeue call on the store takes. Default
	// (zero or less): 500.
	Batch int
	// Progress, when set, is called after each call on the store that
	// succeeded (refusals included), in order, from the goroutine that
	// called Requeue.
	Progress func(RequeueChunk)
}

// RequeueChunk is the result of one Requeue call on the store.
type RequeueChunk struct {
	// IDs are the IDs the call was given.
	IDs []string
	// Requeued is how many of them the store requeued. With a Looker a
	// caller can tell which; without one it knows that the others were
	// refused (below) or not parked.
	Requeued int
	// Refused are those the store left parked because they can never be
	// published as stored (from its [*outbox.RequeueRefusedError]).
	Refused []outbox.Refusal
}

// RequeueResult counts a whole [Requeue].
type RequeueResult struct {
	Requeued int              // entries requeued
	Refused  []outbox.Refusal // entries left parked, in order
}

// Requeue moves the parked entries of ids back to pending, Batch IDs per
// call on the store, in the order of ids. A refusal of the store
// ([*outbox.RequeueRefusedError]) is counted, not returned: Requeue goes
// on. Any other store error stops it: the result counts what was done
// before, and the error is the store's as it is. An empty ids does
// nothing.
func Requeue(ctx context.Context, r Requeuer, ids []string, opts RequeueOptions) (RequeueResult, error) {
	size := opts.Batch
	if size <= 0 {
		size = defaultBatch
	}
	var res RequeueResult
	for i := 0; i < len(ids); i += size {
		chunk := ids[i:min(i+size, len(ids))]
		n, err := r.Requeue(ctx, chunk...)
		res.Requeued += n
		var refused *outbox.RequeueRefusedError
		if err != nil && !errors.As(err, &refused) {
			return res, err
		}
		c := RequeueChunk{IDs: chunk, Requeued: n}
		if refused != nil {
			c.Refused = refused.Refused
			res.Refused = append(res.Refused, refused.Refused...)
		}
		if opts.Progress != nil {
			opts.Progress(c)
		}
	}
	return res, nil
}

// Outcome is what [Cancel] did with one entry.
type Outcome int

const (
	// Cancelled: the entry was deleted.
	Cancelled Outcome = iota
	// NotFound: there was no such entry (already sent, cancelled, or
	// never appended).
	NotFound
	// LeftAlone: with [CancelOptions.Recheck], the entry was no longer
	// parked (requeued since it was selected) and was not cancelled.
	LeftAlone
)

// CancelOptions shape one [Cancel].
type CancelOptions struct {
	// Recheck, when set, is used to look each entry up just before its
	// cancel: one that is gone or no longer parked is left alone (only a
	// requeue between the two calls escapes). It is for entries a filter
	// over the parked ones selected. Default (nil): every entry is
	// cancelled whatever its state.
	Recheck outbox.Looker
	// Progress, when set, is called after each entry, in order, from the
	// goroutine that called Cancel.
	Progress func(id string, o Outcome)
}

// CancelResult counts a whole [Cancel].
type CancelResult struct {
	Cancelled int // entries deleted
	NotFound  int // entries there was none of
	LeftAlone int // entries Recheck found no longer parked
}

// LookupError is the error of [Cancel] when Recheck failed: which entry it
// was looking up, and the store's error.
type LookupError struct {
	ID  string
	Err error
}

func (e *LookupError) Error() string { return fmt.Sprintf("looking entry %s up: %v", e.ID, e.Err) }

func (e *LookupError) Unwrap() error { return e.Err }

// Cancel deletes the entries of ids, one call on the store each, in the
// order of ids. A store error stops it: the result counts what was done
// before; the error is a [*LookupError] when Recheck failed, the store's
// as it is when Cancel failed. An empty ids does nothing.
func Cancel(ctx context.Context, c outbox.Canceler, ids []string, opts CancelOptions) (CancelResult, error) {
	var res CancelResult
	for _, id := range ids {
		o, err := cancelOne(ctx, c, id, opts.Recheck)
		if err != nil {
			return res, err
		}
		switch o {
		case Cancelled:
			res.Cancelled++
		case NotFound:
			res.NotFound++
		case LeftAlone:
			res.LeftAlone++
		}
		if opts.Progress != nil {
			opts.Progress(id, o)
		}
	}
	return res, nil
}

// cancelOne cancels one entry, after checking with recheck (when set) that
// it is still parked.
func cancelOne(ctx context.Context, c outbox.Canceler, id string, recheck outbox.Looker) (Outcome, error) {
	if recheck != nil {
		info, err := recheck.Lookup(ctx, id)
		if errors.Is(err, outbox.ErrNotFound) || err == nil && !info.Parked {
			return LeftAlone, nil
		}
		if err != nil {
			return 0, &LookupError{ID: id, Err: err}
		}
	}
	switch err := c.Cancel(ctx, id); {
	case errors.Is(err, outbox.ErrNotFound):
		return NotFound, nil
	case err != nil:
		return 0, err
	}
	return Cancelled, nil
}
