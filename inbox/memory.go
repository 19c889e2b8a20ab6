package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrTxDone is returned (wrapped) when a [MemoryTx] is used after Commit
// or Rollback.
var ErrTxDone = errors.New("inbox: memory transaction already committed or rolled back")

// Memory is an in-memory [Store]: for tests, examples and consumers whose
// effects live in the same process. Its transactions run one at a time
// (Begin waits for the running one to finish), which makes every
// transaction serializable. The zero value is not usable; call
// [NewMemory].
type Memory struct {
	txSem chan struct{} // one slot: the running transaction
	now   func() time.Time

	mu      sync.Mutex // guards the committed state below
	ids     map[string]time.Time
	seqs    map[string]memSeq
	offsets map[offsetKey]int64
}

type memSeq struct {
	seq int64
	at  time.Time
}

type offsetKey struct {
	group, topic string
	partition    int32
}

var (
	_ Store[*MemoryTx]       = (*Memory)(nil)
	_ KeyRecorder[*MemoryTx] = (*Memory)(nil)
	_ Finisher[*MemoryTx]    = (*Memory)(nil)
	_ OldestReporter         = (*Memory)(nil)
)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{
		txSem:   make(chan struct{}, 1),
		now:     time.Now,
		ids:     map[string]time.Time{},
		seqs:    map[string]memSeq{},
		offsets: map[offsetKey]int64{},
	}
}

// MemoryTx is a transaction of a [Memory] store. What it records becomes
// visible when Commit succeeds; functions registered with OnCommit run
// then, in order and before the next transaction begins, so a consumer's
// in-memory effects commit with the records, in commit order. A MemoryTx
// is meant for one goroutine.
type MemoryTx struct {
	m        *Memory
	done     bool
	ids      []string
	idSet    map[string]bool
	seqs     map[string]int64
	offsets  map[offsetKey]int64
	onCommit []func()
}

// Begin starts a transaction, waiting for the running one to finish.
func (m *Memory) Begin(ctx context.Context) (*MemoryTx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case m.txSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &MemoryTx{m: m, idSet: map[string]bool{}, seqs: map[string]int64{}, offsets: map[offsetKey]int64{}}, nil
}

// OnCommit registers fn to run when tx commits (not when it rolls back).
// The functions run in Commit, in the order registered, before the
// store's next transaction begins: the effects of transactions take
// place one transaction at a time, in commit order (so a key's effects
// keep its messages' order), and fn must not begin a transaction of the
// same store (it would wait for itself).
func (tx *MemoryTx) OnCommit(fn func()) { tx.onCommit = append(tx.onCommit, fn) }

// Commit makes tx's records visible and runs its OnCommit functions, then
// lets the next transaction begin.
func (tx *MemoryTx) Commit() error {
	if tx.done {
		return ErrTxDone
	}
	tx.done = true
	m := tx.m
	defer func() { <-m.txSem }() // after the OnCommit functions, even if one panics
	m.mu.Lock()
	now := m.now()
	for _, id := range tx.ids {
		m.ids[id] = now
	}
	for k, s := range tx.seqs {
		m.seqs[k] = memSeq{seq: s, at: now}
	}
	for k, n := range tx.offsets {
		m.offsets[k] = n
	}
	m.mu.Unlock()
	for _, fn := range tx.onCommit {
		fn()
	}
	return nil
}

// Rollback drops tx. Rolling back a finished transaction does nothing.
func (tx *MemoryTx) Rollback() error {
	if tx.done {
		return nil
	}
	tx.done = true
	<-tx.m.txSem
	return nil
}

func (tx *MemoryTx) check(ctx context.Context, m *Memory) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if tx == nil || tx.m != m {
		return fmt.Errorf("inbox: a transaction of another Memory store, or nil; begin it with this store's Begin: %w", ErrInvalidArgument)
	}
	if tx.done {
		return ErrTxDone
	}
	return nil
}

// InTx implements [Store]. A transaction whose context ends before it
// commits is rolled back, with the context's error.
func (m *Memory) InTx(ctx context.Context, fn func(ctx context.Context, tx *MemoryTx) error) (err error) {
	tx, err := m.Begin(ctx)
	if err != nil {
		return err
	}
	finished := false
	defer func() {
		if !finished { // fn panicked (the panic goes on) or called runtime.Goexit
			_ = tx.Rollback()
		}
	}()
	err = fn(ctx, tx)
	finished = true
	if err == nil {
		err = ctx.Err() // a transaction whose context ended does not commit
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Retryable implements [Store]: a Memory store has no conflicts.
func (m *Memory) Retryable(error) bool { return false }

// Record implements [Store].
func (m *Memory) Record(ctx context.Context, tx *MemoryTx, ids []string) ([]bool, error) {
	if err := tx.check(ctx, m); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if slices.Contains(ids, "") {
		return nil, fmt.Errorf("inbox: Record got an empty ID: %w", ErrInvalidMessage)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fresh := make([]bool, len(ids))
	for i, id := range ids {
		_, done := m.ids[id]
		if done || tx.idSet[id] {
			continue
		}
		fresh[i] = true
		tx.idSet[id] = true
		tx.ids = append(tx.ids, id)
	}
	return fresh, nil
}

// RecordWithKeySeqs implements [KeyRecorder]: Record, then KeySeqs.
func (m *Memory) RecordWithKeySeqs(ctx context.Context, tx *MemoryTx, ids, keys []string) ([]bool, map[string]int64, error) {
	fresh, err := m.Record(ctx, tx, ids)
	if err != nil {
		return nil, nil, err
	}
	seqs, err := m.KeySeqs(ctx, tx, keys)
	if err != nil {
		return nil, nil, err
	}
	return fresh, seqs, nil
}

// Finish implements [Finisher]: SetKeySeqs, then SaveOffsets.
func (m *Memory) Finish(ctx context.Context, tx *MemoryTx, seqs map[string]int64, offsets []Offset) error {
	if err := m.SetKeySeqs(ctx, tx, seqs); err != nil {
		return err
	}
	return m.SaveOffsets(ctx, tx, offsets)
}

// KeySeqs implements [Store].
func (m *Memory) KeySeqs(ctx context.Context, tx *MemoryTx, keys []string) (map[string]int64, error) {
	if err := tx.check(ctx, m); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(keys))
	for _, k := range keys {
		if s, ok := m.seqs[k]; ok {
			out[k] = s.seq
		}
	}
	return out, nil
}

// SetKeySeqs implements [Store].
func (m *Memory) SetKeySeqs(ctx context.Context, tx *MemoryTx, seqs map[string]int64) error {
	if err := tx.check(ctx, m); err != nil {
		return err
	}
	for k, s := range seqs {
		tx.seqs[k] = s
	}
	return nil
}

// SaveOffsets implements [Store].
func (m *Memory) SaveOffsets(ctx context.Context, tx *MemoryTx, offsets []Offset) error {
	if err := tx.check(ctx, m); err != nil {
		return err
	}
	for _, o := range offsets {
		tx.offsets[offsetKey{o.Group, o.Topic, o.Partition}] = o.Next
	}
	return nil
}

// Offsets implements [Store].
func (m *Memory) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int32]int64{}
	for k, n := range m.offsets {
		if k.group == group && k.topic == topic {
			out[k.partition] = n
		}
	}
	return out, nil
}

// Backdate moves the committed records of ids (the time each was
// recorded) and of keys (the time each key's number was last set) back by
// d, as if they had been written d earlier; IDs and keys not recorded are
// ignored. It is for tests of retention (the inboxtest Harness.Backdate)
// and is safe for concurrent use.
func (m *Memory) Backdate(d time.Duration, ids, keys []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		if at, ok := m.ids[id]; ok {
			m.ids[id] = at.Add(-d)
		}
	}
	for _, k := range keys {
		if s, ok := m.seqs[k]; ok {
			s.at = s.at.Add(-d)
			m.seqs[k] = s
		}
	}
}

// Purge implements [Store].
func (m *Memory) Purge(ctx context.Context, before time.Time, limit int) (int, int, error) {
	if limit < 1 {
		return 0, 0, fmt.Errorf("inbox: Purge limit %d, want at least 1: %w", limit, ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	type rec struct {
		id string
		at time.Time
	}
	var old []rec
	for id, at := range m.ids {
		if at.Before(before) {
			old = append(old, rec{id, at})
		}
	}
	slices.SortFunc(old, func(a, b rec) int { return a.at.Compare(b.at) })
	ids := min(len(old), limit)
	for _, r := range old[:ids] {
		delete(m.ids, r.id)
	}
	keys := 0
	for k, s := range m.seqs {
		if keys == limit {
			break
		}
		if s.at.Before(before) {
			delete(m.seqs, k)
			keys++
		}
	}
	return ids, keys, nil
}

// Oldest implements [OldestReporter]: the earliest committed time of its
// recorded IDs and key numbers, by a scan of both (a Memory is small).
func (m *Memory) Oldest(ctx context.Context) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var oldest time.Time
	ok := false
	note := func(at time.Time) {
		if !ok || at.Before(oldest) {
			oldest, ok = at, true
		}
	}
	for _, at := range m.ids {
		note(at)
	}
	for _, s := range m.seqs {
		note(s.at)
	}
	return oldest, ok, nil
}
