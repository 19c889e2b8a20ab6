package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/outboxrelay/outbox"
)

// ErrTxDone is returned (wrapped) when a [Tx] is used after Commit or
// Rollback.
var ErrTxDone = errors.New("memory: transaction already committed or rolled back; begin a new one with Backend.Begin")

// Tx is an in-memory transaction of one [Backend]. Entries appended in it
// with [Backend.AppendInTx] are buffered and become visible all at once
// when [Tx.Commit] succeeds; [Tx.Rollback] drops them. A Tx is safe for
// concurrent use but is meant for one goroutine, like a database
// transaction.
type Tx struct {
	b *Backend

	mu      sync.Mutex
	done    bool
	pending []outbox.Entry // prepared deep copies, in append order
}

// Begin starts a transaction. It never fails; a transaction begun after
// Close fails at AppendInTx or Commit with [outbox.ErrClosed].
func (b *Backend) Begin() *Tx {
	return &Tx{b: b}
}

// AppendInTx validates entries with [outbox.PrepareEntries] and buffers
// deep copies of them (payload and headers included) in tx; they become
// visible when tx commits. At commit, an entry whose ID already exists, or
// was appended earlier in tx, is skipped. Invalid entries give an error
// wrapping [outbox.ErrInvalidEntry] and nothing of the call is buffered.
// No entries does nothing and returns nil. The entries slice and its
// values are not retained. A nil tx, or a tx of another Backend, gives an
// error wrapping [outbox.ErrInvalidArgument]; a finished tx one wrapping
// [ErrTxDone]; after Close the error wraps [outbox.ErrClosed]; on a sealed
// backend ([Backend.Seal]) entries are refused with an error wrapping
// [outbox.ErrSealed].
func (b *Backend) AppendInTx(ctx context.Context, tx *Tx, entries ...outbox.Entry) error {
	b.mu.Lock()
	closed, sealed := b.closed, b.sealed
	b.mu.Unlock()
	if closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if sealed {
		return errSealed
	}
	if tx == nil {
		return fmt.Errorf("memory: AppendInTx needs a transaction from Backend.Begin, got nil: %w", outbox.ErrInvalidArgument)
	}
	if tx.b != b {
		return fmt.Errorf("memory: AppendInTx got a transaction of another Backend; begin it with this Backend's Begin: %w", outbox.ErrInvalidArgument)
	}
	if b.keySeq {
		if err := outbox.CheckKeySeqHeaders(entries); err != nil {
			return fmt.Errorf("memory: AppendInTx: %w", err)
		}
	}
	prepared, err := outbox.PrepareEntriesWith(ctx, entries, len(b.parts), b.limits)
	if err != nil {
		return err
	}
	for i := range prepared {
		// PrepareEntries shares Payload and Headers with the caller; the
		// stored entry must not.
		prepared[i] = prepared[i].Clone()
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	tx.pending = append(tx.pending, prepared...)
	return nil
}

// Append appends entries in a transaction of their own: AppendInTx on a
// new Tx, then Commit.
func (b *Backend) Append(ctx context.Context, entries ...outbox.Entry) error {
	tx := b.Begin()
	if err := b.AppendInTx(ctx, tx, entries...); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Commit makes the entries appended in tx visible at once, in append
// order, skipping those whose ID already exists. Each new entry gets
// CreatedAt = the clock's now and the next append sequence number (and,
// with Options.KeySequence, the next number of its key); its
// first next attempt time is the later of NotBefore and CreatedAt.
// Subscribers to [Backend.Notifications] are signalled if at least one
// entry was added. Commit after Commit or Rollback returns [ErrTxDone];
// after the backend is closed it ends tx and returns an error wrapping
// [outbox.ErrClosed]. On a sealed backend ([Backend.Seal]) a tx with
// entries ends without adding any and Commit returns an error wrapping
// [outbox.ErrSealed]: the seal takes effect here, where entries become
// visible, so an append either committed before Seal returned or fails.
func (tx *Tx) Commit() error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	tx.done = true
	entries := tx.pending
	tx.pending = nil

	b := tx.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	if b.sealed && len(entries) > 0 {
		return errSealed
	}
	now := b.clock()
	var added []int // partitions appended to, in first-append order
	for _, e := range entries {
		if _, ok := b.entries[e.ID]; ok {
			continue
		}
		b.seq++
		e.CreatedAt = now
		if b.keySeq && e.Key != "" {
			// e is a deep copy made at AppendInTx, so its Headers are
			// the backend's own.
			b.keySeqs[e.Key]++
			if e.Headers == nil {
				e.Headers = make(map[string]string, 1)
			}
			e.Headers[outbox.HeaderKeySeq] = outbox.FormatKeySeq(b.keySeqs[e.Key])
		}
		due := now
		if nb := e.NotBefore.Round(0); nb.After(now) {
			due = nb
		}
		it := &item{e: e, seq: b.seq, due: due}
		b.entries[e.ID] = it
		b.parts[e.Partition].admit(it)
		if !slices.Contains(added, e.Partition) {
			added = append(added, e.Partition)
		}
	}
	b.notify(added)
	return nil
}

// Rollback drops the entries appended in tx. It returns [ErrTxDone] after
// Commit or Rollback.
func (tx *Tx) Rollback() error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	tx.done = true
	tx.pending = nil
	return nil
}
