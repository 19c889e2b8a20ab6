package move

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// Result is what [Run] did.
type Result struct {
	// MoveID is the ID of the move, from the destination's hold.
	MoveID string
	// Moved counts the entries this run added to the destination.
	Moved int64
	// ByState counts the entries this run exported (moved and skipped) by
	// their state when exported.
	ByState Counts
	// Skipped counts the exported entries the destination already held
	// with the same content: imported by an earlier, interrupted run.
	Skipped int64
	// AlreadyDone reports that the move had finished before this run: the
	// source sealed and empty, the destination released. Nothing was done.
	AlreadyDone bool
	// Sealed reports that the source is known to be sealed (by this run or
	// an earlier one). It is false when Run stopped before its seal
	// returned, for example interrupted while the seal waited for open
	// transactions: the source may then still accept appends.
	Sealed bool
	// Took is how long the run took.
	Took time.Duration
}

// Status is what [Inspect] reports of a move's two outboxes.
type Status struct {
	// Source and Destination are the entries of each side by state.
	Source, Destination Counts
	// Sealed reports whether the source is sealed.
	Sealed bool
	// Hold is the destination's hold. MoveID and MoveFrom are read from
	// its reason when it is held by a move (empty otherwise); ThisMove
	// reports that the move is from Options.SourceName.
	Hold             outbox.HoldState
	MoveID, MoveFrom string
	ThisMove         bool
}

// Complete reports whether the move is over: the source sealed and empty,
// the destination released.
func (s Status) Complete() bool {
	return s.Sealed && s.Source.Total() == 0 && !s.Hold.Held
}

// ConflictError is the error of [Run] when the destination holds an entry
// with the ID of a source entry but another content. The batch that holds
// it stays in the source.
type ConflictError struct {
	// ID is the entry's ID; Partition its source partition.
	ID        string
	Partition int
	// Field names what differs: "topic", "key", "payload" or "headers".
	Field string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("move: the destination already holds an entry with ID %q whose %s differs from the source's (source partition %d): the move stopped and left the entry's batch in the source; "+
		"look at both (outbox show %s), cancel the one that must not be delivered (outbox cancel %s on its outbox), then run the move again", e.ID, e.Field, e.Partition, e.ID, e.ID)
}

// holdPrefix starts the hold reason of a move: "outbox move ID from SOURCE".
const holdPrefix = "outbox move "

// HoldReason is the reason a move holds its destination with.
func HoldReason(moveID, sourceName string) string {
	return holdPrefix + moveID + " from " + sourceName
}

// ParseHoldReason reads the move ID and the source's name from a hold
// reason written by [HoldReason]; ok is false for any other reason.
func ParseHoldReason(reason string) (moveID, sourceName string, ok bool) {
	rest, ok := strings.CutPrefix(reason, holdPrefix)
	if !ok {
		return "", "", false
	}
	moveID, sourceName, ok = strings.Cut(rest, " from ")
	if !ok || moveID == "" || strings.Contains(moveID, " ") {
		return "", "", false
	}
	return moveID, sourceName, true
}

func newMoveID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// Inspect reports the state of a move from `from` to `to`: both sides'
// counts, the seal and the hold. It changes nothing.
func Inspect(ctx context.Context, from, to outbox.Store, opts Options) (Status, error) {
	src, dst, opts, err := pair(from, to, opts)
	if err != nil {
		return Status{}, err
	}
	return inspect(ctx, src, dst, opts)
}

func inspect(ctx context.Context, src source, dst destination, opts Options) (Status, error) {
	var st Status
	var err error
	if st.Source, err = Count(ctx, src); err != nil {
		return st, fmt.Errorf("move: counting the source: %w", err)
	}
	if st.Destination, err = Count(ctx, dst); err != nil {
		return st, fmt.Errorf("move: counting the destination: %w", err)
	}
	if st.Sealed, err = src.Sealed(ctx); err != nil {
		return st, fmt.Errorf("move: reading whether the source is sealed: %w", err)
	}
	if st.Hold, err = dst.HoldState(ctx); err != nil {
		return st, fmt.Errorf("move: reading the destination's hold: %w", err)
	}
	if st.Hold.Held {
		if id, from, ok := ParseHoldReason(st.Hold.Reason); ok {
			st.MoveID, st.MoveFrom, st.ThisMove = id, from, from == opts.SourceName
		}
	}
	return st, nil
}

// Prepare holds the destination for a move from `from` (step 1 of the
// protocol) and returns the move's ID. The destination must be empty, or
// already held by a move from Options.SourceName (then Prepare changes
// nothing and returns that move's ID). It refuses a destination held for
// another reason, a sealed source and a destination that is not empty.
func Prepare(ctx context.Context, from, to outbox.Store, opts Options) (string, error) {
	src, dst, opts, err := pair(from, to, opts)
	if err != nil {
		return "", err
	}
	st, err := inspect(ctx, src, dst, opts)
	if err != nil {
		return "", err
	}
	switch {
	case st.ThisMove:
		return st.MoveID, nil
	case st.Hold.Held && st.MoveID != "":
		return "", fmt.Errorf("move: the destination is held by another move (%s, since %s), from %s, not from %s: finish or roll back that move first (outbox move --release on it), or check the source you named",
			st.MoveID, st.Hold.Since.UTC().Format(time.RFC3339), st.MoveFrom, opts.SourceName)
	case st.Hold.Held:
		return "", fmt.Errorf("move: the destination is held for another reason (%q, since %s): it is not a move's hold; release it first if that is over", st.Hold.Reason, st.Hold.Since.UTC().Format(time.RFC3339))
	case st.Destination.Total() > 0:
		return "", fmt.Errorf("move: the destination is not empty (%s) and not prepared for a move from %s: a move needs an empty destination (its relays would deliver those entries before the moved ones); name another outbox, or drain or cancel these entries first",
			st.Destination, opts.SourceName)
	case st.Sealed:
		return "", fmt.Errorf("move: the source is sealed (moved before?) and the destination is not held by a move from it: unseal it first (outbox move --unseal) if services must append to it again")
	}
	id := newMoveID()
	if err := dst.Hold(ctx, HoldReason(id, opts.SourceName)); err != nil {
		return "", fmt.Errorf("move: holding the destination: %w", err)
	}
	opts.Logger.InfoContext(ctx, "move: destination held", "move", id, "from", opts.SourceName)
	return id, nil
}

// Release unholds the destination of a move from Options.SourceName: its
// relays deliver at their next fetch. It rolls a move back before the seal
// (or finishes one whose entries are all moved). It refuses while the
// source is sealed and not empty (the destination's relays would deliver
// appended entries before the entries still to move: finish the move with
// Run, or Unseal first), and a hold that is not this move's. A destination
// that is not held is left as it is.
func Release(ctx context.Context, from, to outbox.Store, opts Options) error {
	src, dst, opts, err := pair(from, to, opts)
	if err != nil {
		return err
	}
	st, err := inspect(ctx, src, dst, opts)
	if err != nil {
		return err
	}
	switch {
	case !st.Hold.Held:
		return nil
	case !st.ThisMove:
		return fmt.Errorf("move: the destination is held by %q, not by a move from %s: nothing was released; check the source you named", st.Hold.Reason, opts.SourceName)
	case st.Sealed && st.Source.Total() > 0:
		return fmt.Errorf("move: the source is sealed and still holds %s: releasing the destination now would deliver entries appended to it before the source's; finish the move (outbox move), or roll the seal back first (outbox move --unseal)", st.Source)
	}
	if err := dst.Unhold(ctx); err != nil {
		return fmt.Errorf("move: releasing the destination: %w", err)
	}
	opts.Logger.InfoContext(ctx, "move: destination released", "move", st.MoveID)
	return nil
}

// Unseal rolls the seal of the source back: appends to it work again. The
// entries already moved stay in the destination.
func Unseal(ctx context.Context, from outbox.Store) error {
	s, ok := from.(outbox.Sealer)
	if !ok {
		return missing(from, "outbox.Sealer", "seal and unseal the source")
	}
	if err := s.Unseal(ctx); err != nil {
		return fmt.Errorf("move: unsealing the source: %w", err)
	}
	return nil
}

// Run is the final step of a move (step 3 of the protocol): it seals the
// source, moves every entry of every source partition to the destination,
// and releases the destination. The destination must be held by a move
// from Options.SourceName ([Prepare]). Run is resumable: run again after
// any failure or cancellation, it finishes the move. When the move was
// already complete it returns at once with Result.AlreadyDone.
//
// Before it releases the destination it checks that the source is still
// sealed: a source unsealed during the run (--unseal, a rollback) leaves
// the destination held and fails Run.
//
// Context errors are returned as they are.
func Run(ctx context.Context, from, to outbox.Store, opts Options) (Result, error) {
	start := time.Now()
	src, dst, opts, err := pair(from, to, opts)
	if err != nil {
		return Result{}, err
	}
	st, err := inspect(ctx, src, dst, opts)
	if err != nil {
		return Result{}, ctxOr(ctx, err)
	}
	res := Result{MoveID: st.MoveID}
	switch {
	case !st.Hold.Held && st.Sealed && st.Source.Total() == 0:
		res.AlreadyDone, res.Sealed = true, true
		res.Took = time.Since(start)
		return res, nil
	case !st.Hold.Held:
		return res, fmt.Errorf("move: the destination is not held by a move from %s: prepare it first (outbox move --prepare, or move.Prepare), deploy its relays and roll the services over to it, then run the move", opts.SourceName)
	case !st.ThisMove:
		return res, fmt.Errorf("move: the destination is held by %q, not by a move from %s: nothing was changed; check the source you named", st.Hold.Reason, opts.SourceName)
	}
	if err := src.Seal(ctx); err != nil {
		res.Took = time.Since(start)
		return res, ctxOr(ctx, fmt.Errorf("move: sealing the source: %w", err))
	}
	res.Sealed = true
	if err := holdAfterSeal(ctx, src, dst, st, &res); err != nil {
		res.Took = time.Since(start)
		return res, err
	}
	if !st.Sealed {
		opts.Logger.InfoContext(ctx, "move: source sealed", "move", res.MoveID)
	}
	m := &mover{src: src, dst: dst, opts: opts, total: st.Source.Total(), parts: src.Partitions()}
	for pass := 0; ; pass++ {
		if err := m.runPass(ctx); err != nil {
			m.fill(&res)
			res.Took = time.Since(start)
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return res, err
		}
		c, err := Count(ctx, src)
		if err != nil {
			m.fill(&res)
			return res, ctxOr(ctx, fmt.Errorf("move: counting the source: %w", err))
		}
		if c.Total() == 0 {
			break
		}
		if pass == 2 {
			m.fill(&res)
			return res, fmt.Errorf("move: the sealed source still holds %s after three passes over its partitions: something adds entries to it (a requeue?); run the move again", c)
		}
	}
	// Release only a destination whose source is still sealed: an
	// unsealed source takes appends that would be delivered after the
	// destination's entries of their keys, or not at all.
	sealed, err := src.Sealed(ctx)
	if err != nil {
		m.fill(&res)
		return res, ctxOr(ctx, fmt.Errorf("move: every entry was moved, but reading whether the source is still sealed failed (run the move again to release the destination): %w", err))
	}
	if !sealed {
		m.fill(&res)
		res.Sealed = false
		return res, errors.New("move: every entry was moved, but the source is no longer sealed (outbox move --unseal during the move?), so the destination stays held: to finish the move, run it again (it seals the source again and moves what was appended since); to roll back, see outbox move --release")
	}
	if err := dst.Unhold(ctx); err != nil {
		m.fill(&res)
		return res, ctxOr(ctx, fmt.Errorf("move: every entry was moved, but releasing the destination failed (run the move again to release it): %w", err))
	}
	opts.Logger.InfoContext(ctx, "move: done, destination released", "move", res.MoveID, "moved", m.moved, "skipped", m.skipped)
	m.fill(&res)
	res.Took = time.Since(start)
	return res, nil
}

// holdAfterSeal reads the destination's hold again, now that nothing
// appends to the source: a release (outbox move --release) between Run's
// inspection st and the seal would let the destination deliver its own
// entries before the moved ones of their keys. When the hold is no longer
// st's, it unseals a source that st found unsealed (res.Sealed then
// reports whether it still is) and returns why the move cannot go on.
func holdAfterSeal(ctx context.Context, src source, dst destination, st Status, res *Result) error {
	hs, err := dst.HoldState(ctx)
	if err == nil && hs.Held && hs.Reason == st.Hold.Reason {
		return nil
	}
	if err == nil && !st.Sealed {
		// Back to where the move found the source; report the unseal's
		// own failure with the rest.
		err = src.Unseal(ctx)
		res.Sealed = err != nil
	}
	if err != nil {
		return ctxOr(ctx, fmt.Errorf("move: reading the destination's hold after sealing the source: %w", err))
	}
	return fmt.Errorf("move: the destination was released (or held for something else: %q) while the move started (outbox move --release?); nothing was moved and the source was left as the move found it: prepare the destination again (outbox move --prepare) to move", hs.Reason)
}

// ctxOr returns ctx's error when ctx is done (context errors pass through
// unwrapped), err otherwise.
func ctxOr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}
