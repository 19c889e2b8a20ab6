package move

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outbox"
)

// DefaultOwner is the lease owner of a move when [Options.Owner] is empty.
// It is fixed, so a move that was killed and is run again retakes the
// source partitions its predecessor still held without waiting for their
// leases to expire.
const DefaultOwner = "outbox-move"

// Defaults of [Options].
const (
	DefaultLeaseTTL     = 30 * time.Second
	DefaultBatch        = 500
	DefaultWorkers      = 4
	DefaultPollInterval = time.Second
)

// holdPrefix starts the hold reason of a move: "outbox move ID from SOURCE".
const holdPrefix = "outbox move "

// Options configure [Prepare], [Run], [Inspect], [Release] and [Unseal].
// The zero value is ready to use; each field's doc gives its default.
type Options struct {
	// SourceName names the source in the destination's hold reason, which
	// Run and Release check, so give the same name to every step of one
	// move. It must not hold a password. `outbox move` uses the source's
	// store URL without its user info, and the outbox's name in it.
	// Default: "unnamed source".
	SourceName string
	// Owner is the lease owner the mover takes the source partitions as.
	// Default: [DefaultOwner].
	Owner string
	// LeaseTTL is the time-to-live of the mover's leases on the source
	// partitions; the mover renews a lease once half of it is gone.
	// Default: [DefaultLeaseTTL].
	LeaseTTL time.Duration
	// Batch is how many entries one ExportBatch and one Import carry.
	// Default: [DefaultBatch].
	Batch int
	// Workers is how many source partitions are moved at once. Default:
	// [DefaultWorkers].
	Workers int
	// PollInterval is how often Run tries again to take a source
	// partition whose lease another owner holds. Default:
	// [DefaultPollInterval].
	PollInterval time.Duration
	// Progress, when set, is called after each batch and while Run waits
	// for a lease, one call at a time (never concurrently). It must not
	// block for long. Default: nil.
	Progress func(Progress)
	// Logger gets what Run does at INFO (the seal, each partition done,
	// the release) and the leases it waits for at WARN. Default: a logger
	// that discards.
	Logger *slog.Logger

	// afterImport is a test hook (set through export_test.go only): called
	// after each Import, before RemoveExported; an error stops Run there.
	afterImport func(partition int, ids []string) error
}

func (o Options) withDefaults() (Options, error) {
	if o.SourceName == "" {
		o.SourceName = "unnamed source"
	}
	if o.Owner == "" {
		o.Owner = DefaultOwner
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.LeaseTTL < 0:
		return o, fmt.Errorf("move: Options.LeaseTTL is %v: use 0 (the default, %v) or a positive duration", o.LeaseTTL, DefaultLeaseTTL)
	case o.Batch < 0:
		return o, fmt.Errorf("move: Options.Batch is %d: use 0 (the default, %d) or a positive count", o.Batch, DefaultBatch)
	case o.Workers < 0:
		return o, fmt.Errorf("move: Options.Workers is %d: use 0 (the default, %d) or a positive count", o.Workers, DefaultWorkers)
	case o.PollInterval < 0:
		return o, fmt.Errorf("move: Options.PollInterval is %v: use 0 (the default) or a positive duration", o.PollInterval)
	}
	return o, nil
}

// Counts are the entries of an outbox by state.
type Counts struct {
	// Due counts pending entries whose next attempt time has come.
	Due int64
	// Waiting counts pending entries that are not due yet: scheduled
	// (NotBefore ahead) or waiting for a retry.
	Waiting int64
	// Parked counts parked entries.
	Parked int64
}

// Total is every entry counted.
func (c Counts) Total() int64 { return c.Due + c.Waiting + c.Parked }

func (c Counts) String() string {
	return fmt.Sprintf("%d entries (%d due, %d waiting, %d parked)", c.Total(), c.Due, c.Waiting, c.Parked)
}

// Count reports the entries of s by state ([outbox.Inspector.Stats]).
func Count(ctx context.Context, s outbox.Store) (Counts, error) {
	in, ok := s.(outbox.Inspector)
	if !ok {
		return Counts{}, missing(s, "outbox.Inspector", "count its entries")
	}
	st, err := in.Stats(ctx)
	if err != nil {
		return Counts{}, err
	}
	return Counts{Due: st.Due, Waiting: max(0, st.Pending-st.Due), Parked: st.Parked}, nil
}

// Progress is what [Options.Progress] is given.
type Progress struct {
	// Moved counts the entries this run added to the destination so far;
	// Skipped those the destination already held (a resumed move).
	Moved, Skipped int64
	// Total is how many entries the source held when the run began.
	Total int64
	// PartitionsDone of Partitions source partitions are empty.
	PartitionsDone, Partitions int
	// Waiting is set when a call reports a wait for a source partition's
	// lease held by another owner (a relay of the source still running).
	Waiting *LeaseWait
}

// LeaseWait is a wait for a source partition's lease.
type LeaseWait struct {
	Partition int
	// Owner holds the lease until Expires (by the store's clock); both are
	// zero when the store does not report them
	// ([outbox.PartitionInspector]).
	Owner   string
	Expires time.Time
}

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

// missing is the error of a store that lacks an optional interface.
func missing(s outbox.Store, iface, what string) error {
	return fmt.Errorf("move: the store %T does not implement %s, which a move needs to %s: this backend cannot take part in a move (the memory, Postgres and Redis backends can)", s, iface, what)
}

type source interface {
	outbox.Store
	outbox.Exporter
	outbox.Sealer
}

type destination interface {
	outbox.Store
	outbox.Importer
	outbox.Holder
	outbox.Looker
}

func asSource(s outbox.Store) (source, error) {
	if s == nil {
		return nil, errors.New("move: the source store is nil")
	}
	if _, ok := s.(outbox.Exporter); !ok {
		return nil, missing(s, "outbox.Exporter", "read and remove the source's entries")
	}
	if _, ok := s.(outbox.Sealer); !ok {
		return nil, missing(s, "outbox.Sealer", "seal the source")
	}
	if _, ok := s.(outbox.Inspector); !ok {
		return nil, missing(s, "outbox.Inspector", "count the source's entries")
	}
	return s.(source), nil
}

func asDestination(s outbox.Store) (destination, error) {
	if s == nil {
		return nil, errors.New("move: the destination store is nil")
	}
	if _, ok := s.(outbox.Importer); !ok {
		return nil, missing(s, "outbox.Importer", "add entries to the destination")
	}
	if _, ok := s.(outbox.Holder); !ok {
		return nil, missing(s, "outbox.Holder", "hold the destination's relays")
	}
	if _, ok := s.(outbox.Looker); !ok {
		return nil, missing(s, "outbox.Looker", "check entries the destination already holds")
	}
	if _, ok := s.(outbox.Inspector); !ok {
		return nil, missing(s, "outbox.Inspector", "count the destination's entries")
	}
	return s.(destination), nil
}

// pair checks the two stores and the options.
func pair(from, to outbox.Store, opts Options) (source, destination, Options, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, nil, opts, err
	}
	src, err := asSource(from)
	if err != nil {
		return nil, nil, opts, err
	}
	dst, err := asDestination(to)
	if err != nil {
		return nil, nil, opts, err
	}
	if from == to {
		return nil, nil, opts, errors.New("move: the source and the destination are the same outbox: name another outbox as the destination")
	}
	return src, dst, opts, nil
}

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
	// The hold again, now that nothing appends to the source: a release
	// (outbox move --release) between the inspection above and the seal
	// would let the destination deliver its own entries before the moved
	// ones of their keys.
	if hs, err := dst.HoldState(ctx); err != nil || !hs.Held || hs.Reason != st.Hold.Reason {
		if err == nil && !st.Sealed {
			// Back to where the move found the source; report the unseal's
			// own failure with the rest.
			err = src.Unseal(ctx)
			res.Sealed = err != nil
		}
		res.Took = time.Since(start)
		if err != nil {
			return res, ctxOr(ctx, fmt.Errorf("move: reading the destination's hold after sealing the source: %w", err))
		}
		return res, fmt.Errorf("move: the destination was released (or held for something else: %q) while the move started (outbox move --release?); nothing was moved and the source was left as the move found it: prepare the destination again (outbox move --prepare) to move", hs.Reason)
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

// ctxOr returns ctx's error when ctx is done (context errors pass through
// unwrapped), err otherwise.
func ctxOr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// mover is one Run's shared state.
type mover struct {
	src   source
	dst   destination
	opts  Options
	total int64
	parts int

	mu       sync.Mutex // guards the counters and Progress calls
	moved    int64
	skipped  int64
	byState  Counts
	partDone int
}

func (m *mover) fill(r *Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Moved, r.Skipped, r.ByState = m.moved, m.skipped, m.byState
}

// report updates the counters and calls Progress.
func (m *mover) report(update func(), wait *LeaseWait) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if update != nil {
		update()
	}
	if m.opts.Progress != nil {
		m.opts.Progress(Progress{Moved: m.moved, Skipped: m.skipped, Total: m.total,
			PartitionsDone: m.partDone, Partitions: m.parts, Waiting: wait})
	}
}

// runPass moves every source partition, Workers at a time.
func (m *mover) runPass(ctx context.Context) error {
	m.mu.Lock()
	m.partDone = 0
	m.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	todo := make(chan int, m.parts)
	for p := range m.parts {
		todo <- p
	}
	close(todo)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range min(m.opts.Workers, m.parts) {
		wg.Go(func() {
			for p := range todo {
				if err := m.partition(ctx, p); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// partition moves one source partition until it is empty.
func (m *mover) partition(ctx context.Context, p int) error {
	l, deadline, err := m.acquire(ctx, p)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = m.src.ReleaseLease(rctx, l)
	}()
	for {
		if time.Until(deadline) < m.opts.LeaseTTL/2 {
			if l, deadline, err = m.keep(ctx, l); err != nil {
				return err
			}
		}
		batch, err := m.src.ExportBatch(ctx, l, m.opts.Batch)
		if errors.Is(err, outbox.ErrLeaseLost) {
			if l, deadline, err = m.acquire(ctx, p); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("move: exporting from source partition %d: %w", p, err)
		}
		if len(batch) == 0 {
			m.report(func() { m.partDone++ }, nil)
			m.opts.Logger.DebugContext(ctx, "move: source partition empty", "partition", p)
			return nil
		}
		n, err := m.dst.Import(ctx, batch)
		if err != nil {
			return fmt.Errorf("move: importing %d entries of source partition %d into the destination (nothing of them was removed from the source): %w", len(batch), p, err)
		}
		if n < len(batch) {
			if err := m.checkSkipped(ctx, p, batch); err != nil {
				return err
			}
		}
		now := time.Now()
		m.report(func() {
			m.moved += int64(n)
			m.skipped += int64(len(batch) - n)
			for _, e := range batch {
				switch {
				case e.Parked:
					m.byState.Parked++
				case e.DueAt.After(now):
					m.byState.Waiting++
				default:
					m.byState.Due++
				}
			}
		}, nil)
		ids := make([]string, len(batch))
		for i, e := range batch {
			ids[i] = e.ID
		}
		if hook := m.opts.afterImport; hook != nil {
			if err := hook(p, ids); err != nil {
				return err
			}
		}
		if time.Until(deadline) < m.opts.LeaseTTL/2 {
			if l, deadline, err = m.keep(ctx, l); err != nil {
				return err
			}
		}
		err = m.src.RemoveExported(ctx, l, ids)
		if errors.Is(err, outbox.ErrLeaseLost) {
			// The batch is in both outboxes: the next export returns it
			// again and Import skips it.
			if l, deadline, err = m.acquire(ctx, p); err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("move: removing %d moved entries from source partition %d (they are in the destination; a new run skips them): %w", len(ids), p, err)
		}
	}
}

// checkSkipped looks up, in the destination, the entries of a batch that
// Import did not all add, and fails on one whose content differs.
func (m *mover) checkSkipped(ctx context.Context, p int, batch []outbox.EntryInfo) error {
	for i, e := range batch {
		got, err := m.dst.Lookup(ctx, e.ID)
		if errors.Is(err, outbox.ErrNotFound) {
			continue // not there: Import cannot have skipped it
		}
		if err != nil {
			return fmt.Errorf("move: looking up entry %q in the destination: %w", e.ID, err)
		}
		if field := differs(e.Entry, got.Entry); field != "" {
			m.withdrawAfter(ctx, batch, i)
			return &ConflictError{ID: e.ID, Partition: p, Field: field}
		}
	}
	return nil
}

// withdrawAfter cancels, in the destination, the entries of the batch
// after batch[i] that have its key: Import put them there ahead of
// batch[i], which the conflict keeps out. They are all still in the
// source (a batch is removed only once it is imported whole), so the run
// after the conflict is resolved imports the key's entries in their
// order, whichever copy of the conflicting entry was cancelled. A
// destination that cannot cancel keeps them; see the package doc.
func (m *mover) withdrawAfter(ctx context.Context, batch []outbox.EntryInfo, i int) {
	c, ok := m.dst.(outbox.Canceler)
	key := batch[i].Key
	if !ok || key == "" {
		return
	}
	for _, e := range batch[i+1:] {
		if e.Key != key {
			continue
		}
		if err := c.Cancel(ctx, e.ID); err != nil && !errors.Is(err, outbox.ErrNotFound) {
			m.opts.Logger.WarnContext(ctx, "move: withdrawing an entry imported after a conflict failed; cancel the source's copy of the conflicting entry to keep its key's order",
				"id", e.ID, "conflict", batch[i].ID, "err", err)
		}
	}
}

// differs names the first field of what an entry is made of that differs.
func differs(a, b outbox.Entry) string {
	switch {
	case a.Topic != b.Topic:
		return "topic"
	case a.Key != b.Key:
		return "key"
	case !bytes.Equal(a.Payload, b.Payload):
		return "payload"
	case !(len(a.Headers) == 0 && len(b.Headers) == 0) && !maps.Equal(a.Headers, b.Headers):
		return "headers"
	}
	return ""
}

// acquire takes partition p's lease, waiting while another owner holds it.
func (m *mover) acquire(ctx context.Context, p int) (outbox.Lease, time.Time, error) {
	for {
		asked := time.Now()
		l, err := m.src.AcquireLease(ctx, p, m.opts.Owner, m.opts.LeaseTTL)
		if err == nil {
			return l, asked.Add(m.opts.LeaseTTL), nil
		}
		if !errors.Is(err, outbox.ErrLeaseHeld) {
			return l, asked, fmt.Errorf("move: taking the lease of source partition %d: %w", p, err)
		}
		wait := &LeaseWait{Partition: p}
		if pin, ok := m.src.(outbox.PartitionInspector); ok {
			if ps, err := pin.PartitionStats(ctx); err == nil && p < len(ps) {
				wait.Owner, wait.Expires = ps[p].Lease.Owner, ps[p].Lease.Expires
			}
		}
		m.opts.Logger.WarnContext(ctx, "move: waiting for a source partition whose lease another owner holds (stop the source's relays)",
			"partition", p, "owner", wait.Owner, "expires", wait.Expires)
		m.report(nil, wait)
		t := time.NewTimer(m.opts.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return l, asked, ctx.Err()
		case <-t.C:
		}
	}
}

// keep renews l, or takes the partition again when it was lost.
func (m *mover) keep(ctx context.Context, l outbox.Lease) (outbox.Lease, time.Time, error) {
	asked := time.Now()
	nl, err := m.src.RenewLease(ctx, l, m.opts.LeaseTTL)
	if err == nil {
		return nl, asked.Add(m.opts.LeaseTTL), nil
	}
	if errors.Is(err, outbox.ErrLeaseLost) {
		return m.acquire(ctx, l.Partition)
	}
	return l, asked, fmt.Errorf("move: renewing the lease of source partition %d: %w", l.Partition, err)
}
