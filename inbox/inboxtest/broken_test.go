package inboxtest_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/inbox/inboxtest"
	"github.com/outboxrelay/outbox/internal/brokentest"
)

// The suite proves itself on deliberately broken stores: each variant
// wraps inbox.Memory and breaks one contract of inbox.Store from the
// outside. TestSuiteRejectsBrokenStores runs, for each variant, the cases
// that pin the broken contract in a subprocess (Run takes a *testing.T, so
// a run that must fail needs a test binary of its own: see
// internal/brokentest) and asserts that each of them fails.

// brokenEnv names the variant a TestBrokenChild subprocess runs.
const brokenEnv = "INBOXTEST_BROKEN"

// variant is one deliberately broken store.
type variant struct {
	name string
	// breaks says which contract is broken, and how.
	breaks string
	// caughtBy lists the cases ("Area/Case") that must fail on it.
	caughtBy []string
}

var variants = []variant{
	{"record-always-new", "Record reports every ID new, committed or not",
		[]string{"Record/RecordedOnce", "Record/BatchDuplicatesAnsweredInOrder", "Concurrent/SameIDExactlyOneApplies", "Inbox/DuplicatesSkipHandler"}},
	{"batch-repeats-new", "Record reports an ID repeated inside its batch new at each occurrence",
		[]string{"Record/BatchDuplicatesAnsweredInOrder", "Inbox/DuplicatesSkipHandler"}},
	{"answers-sorted", "Record answers in the IDs' sorted order (a query's row order), not in the order given",
		[]string{"Record/BatchAnswersInOrder", "Record/BatchDuplicatesAnsweredInOrder"}},
	{"own-records-new", "Record reports an ID new when an earlier Record of the same transaction recorded it",
		[]string{"Record/SameTransactionTwice"}},
	{"large-batch-chunks-swapped", "Record of more than 1000 IDs answers its chunks of 1000 in the wrong order (a store splitting a batch)",
		[]string{"Record/LargeBatch"}},
	{"ids-case-insensitive", "IDs compared ignoring case and trailing spaces (a _ci, PAD SPACE collation)",
		[]string{"Record/IDsComparedExactly"}},
	{"ids-truncated", "IDs cut to their first 64 bytes (a VARCHAR(64) column)",
		[]string{"Record/IDsComparedExactly"}},
	{"records-survive-rollback", "InTx commits what fn wrote when fn returns an error",
		[]string{"Tx/RollbackRecordsNothing", "Offsets/SavedWithTransactionOnly", "Inbox/HandlerErrorRollsBack"}},
	{"panic-commits", "InTx commits what fn wrote when fn panics (and re-raises the panic)",
		[]string{"Tx/PanicRollsBackAndIsReraised"}},
	{"panic-swallowed", "InTx rolls back a panicking fn but returns an error instead of re-raising the panic",
		[]string{"Tx/PanicRollsBackAndIsReraised"}},
	{"check-then-insert", "transactions not serialized: Record checks the committed IDs, then inserts, so concurrent transactions both find an ID new",
		[]string{"Concurrent/SameIDExactlyOneApplies"}},
	{"dirty-read", "transactions not serialized and Record sees other transactions' uncommitted records (READ UNCOMMITTED, or a Redis SET outside the MULTI)",
		[]string{"Concurrent/RolledBackRecordFreesID"}},
	{"keyseqs-unguarded", "transactions not serialized and KeySeqs guards nothing: concurrent read-and-set of a key loses updates",
		[]string{"KeySeqs/ConcurrentUpdatesSerialize", "KeySeqs/AbsentKeyGuarded", "KeySeqs/ConcurrentHandlersOfOneKey"}},
	{"absent-keys-unguarded", "KeySeqs guards the keys it finds but not absent ones (SELECT ... FOR UPDATE locks no row)",
		[]string{"KeySeqs/AbsentKeyGuarded"}},
	{"absent-keys-zero", "KeySeqs reports a key never set as 0 instead of leaving it out",
		[]string{"KeySeqs/AbsentKeysAbsent", "Inbox/GapReportedAndApplied"}},
	{"keys-case-insensitive", "keys compared ignoring case and trailing spaces",
		[]string{"KeySeqs/KeysComparedExactly"}},
	{"recorder-unguarded", "transactions not serialized; KeySeqs guards its keys but RecordWithKeySeqs (inbox.KeyRecorder) does not",
		[]string{"KeyRecorder/GuardsKeys", "KeySeqs/ConcurrentHandlersOfOneKey"}},
	{"finish-drops-offsets", "Finish (inbox.Finisher) sets the key numbers but not the offsets",
		[]string{"Finisher/WritesAsSetKeySeqsAndSaveOffsets", "Inbox/OffsetsStoredWithBatch"}},
	{"offsets-outside-tx", "SaveOffsets writes at once, outside the transaction (visible before commit, kept after rollback)",
		[]string{"Offsets/SavedWithTransactionOnly", "Tx/RollbackRecordsNothing"}},
	{"offsets-keep-max", "SaveOffsets keeps the higher offset instead of overwriting (a rewind is lost)",
		[]string{"Offsets/Overwritten"}},
	{"offsets-any-group", "Offsets returns the topic's offsets of every consumer group",
		[]string{"Offsets/IsolatedPerGroupAndTopic"}},
	{"purge-ignores-limit", "Purge removes every old record whatever its limit",
		[]string{"Purge/Bounded", "Purge/OldestFirst"}},
	{"purge-ignores-horizon", "Purge removes records newer than its horizon",
		[]string{"Purge/OnlyBeforeHorizon", "Purge/KeysToo"}},
	{"purge-keeps-keys", "Purge removes old IDs but never key numbers",
		[]string{"Purge/KeysToo", "Purge/Bounded", "Purge/JanitorAcrossBatches"}},
	{"purge-any-limit", "Purge takes a limit below 1 as no limit instead of rejecting it",
		[]string{"Purge/InvalidLimit"}},
	{"purge-takes-open", "Purge removes the records of transactions still open (they are gone once those commit)",
		[]string{"Purge/SkipsOpenTransactions"}},
	{"purge-waits-for-open", "Purge waits for the transactions in progress to finish (no SKIP LOCKED)",
		[]string{"Purge/SkipsOpenTransactions"}},
	{"oldest-stale", "Oldest (inbox.OldestReporter) answers what it first found, never following the purges",
		[]string{"OldestReporter/ReportsOldest"}},
	{"oldest-is-now", "Oldest reports the time of the call instead of the oldest record's",
		[]string{"OldestReporter/ReportsOldest"}},
}

// TestBrokenChild runs the suite against the variant named by
// INBOXTEST_BROKEN, as a subprocess of TestSuiteRejectsBrokenStores that
// is expected to fail. Outside one it runs the whole suite on the wrapper
// with the variant "none", which breaks nothing and must pass: the
// wrapper itself is sound, so what fails in a child is its variant.
func TestBrokenChild(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		name = "none"
		t.Parallel()
	}
	inboxtest.Run(t, inboxtest.Harness[*inbox.MemoryTx]{
		New: func(t *testing.T) inbox.Store[*inbox.MemoryTx] { return newBroken(name) },
		Backdate: func(t *testing.T, s inbox.Store[*inbox.MemoryTx], d time.Duration, ids, keys []string) {
			s.(*broken).Memory.Backdate(d, ids, keys)
		},
	})
}

func TestSuiteRejectsBrokenStores(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Fatalf("%s is set: run only TestBrokenChild in a child", brokenEnv)
	}
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	vs := make([]brokentest.Variant, len(variants))
	for i, v := range variants {
		vs[i] = brokentest.Variant{Name: v.name, Breaks: v.breaks, CaughtBy: v.caughtBy}
	}
	children := brokentest.Children{Exe: exe, Test: "TestBrokenChild", Env: brokenEnv, Slots: 4 * runtime.NumCPU()}
	children.Reject(t, "broken inbox store → the cases of inboxtest.Run that failed on it", vs)
}

// broken wraps an inbox.Memory and breaks the contract its variant names.
//
// The "loose" variants (check-then-insert, dirty-read, keyseqs-unguarded,
// absent-keys-unguarded, recorder-unguarded) cannot use the Memory's transactions, which run
// one at a time: they run each transaction on a scratch Memory of its own
// (for Begin, Commit and OnCommit) and keep the committed IDs and key
// numbers in the wrapper, as a database without the right locks would.
type broken struct {
	*inbox.Memory
	variant string

	mu        sync.Mutex
	open      map[*inbox.MemoryTx]*txState // transactions in progress
	forgotten map[string]bool              // purge-takes-open: IDs purged while their transaction was open
	offsets   map[string]map[int32]int64   // offsets-outside-tx: "group\x00topic" -> saved at once
	groups    map[string]bool              // offsets-any-group: groups saved
	setSeqs   map[string]int64             // purge-keeps-keys: every key number set
	ids       map[string]bool              // loose: committed IDs
	seqs      map[string]int64             // loose: committed key numbers
	keyLocks  map[string]chan struct{}     // loose: held key guards
	oldest    *time.Time                   // oldest-stale: the first answer found
}

// txState is what the wrapper knows of one open transaction.
type txState struct {
	ids    []string
	idSet  map[string]bool
	seqs   map[string]int64
	locked []string // loose: keys whose guard the transaction holds
}

func newBroken(variant string) *broken {
	return &broken{
		Memory: inbox.NewMemory(), variant: variant,
		open: map[*inbox.MemoryTx]*txState{}, forgotten: map[string]bool{}, offsets: map[string]map[int32]int64{},
		groups: map[string]bool{}, setSeqs: map[string]int64{}, ids: map[string]bool{}, seqs: map[string]int64{}, keyLocks: map[string]chan struct{}{},
	}
}

var (
	_ inbox.Store[*inbox.MemoryTx]       = (*broken)(nil)
	_ inbox.KeyRecorder[*inbox.MemoryTx] = (*broken)(nil)
	_ inbox.Finisher[*inbox.MemoryTx]    = (*broken)(nil)
	_ inbox.OldestReporter               = (*broken)(nil)
)

func (b *broken) loose() bool {
	switch b.variant {
	case "check-then-insert", "dirty-read", "keyseqs-unguarded", "absent-keys-unguarded", "recorder-unguarded":
		return true
	}
	return false
}

func (b *broken) state(tx *inbox.MemoryTx) *txState {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.open[tx]
	if st == nil {
		st = &txState{idSet: map[string]bool{}, seqs: map[string]int64{}}
		b.open[tx] = st
	}
	return st
}

// end forgets tx and releases the key guards it held.
func (b *broken) end(tx *inbox.MemoryTx) {
	b.mu.Lock()
	st := b.open[tx]
	delete(b.open, tx)
	b.mu.Unlock()
	if st == nil {
		return
	}
	for _, k := range st.locked {
		<-b.keyLock(k)
	}
}

func (b *broken) InTx(ctx context.Context, fn func(context.Context, *inbox.MemoryTx) error) (err error) {
	if b.loose() {
		return b.looseInTx(ctx, fn)
	}
	tx, err := b.Memory.Begin(ctx)
	if err != nil {
		return err
	}
	b.state(tx)
	defer b.end(tx)
	finished := false
	defer func() { // fn panicked or called runtime.Goexit
		if finished {
			return
		}
		switch b.variant {
		case "panic-commits":
			_ = tx.Commit()
		case "panic-swallowed":
			_ = tx.Rollback()
			if p := recover(); p != nil {
				err = fmt.Errorf("inboxtest broken: fn panicked: %v", p)
			}
		default:
			_ = tx.Rollback()
		}
	}()
	err = fn(ctx, tx)
	finished = true
	if err != nil {
		if b.variant == "records-survive-rollback" {
			_ = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
		return err
	}
	return tx.Commit()
}

// looseInTx runs fn in a transaction of a scratch Memory, concurrently
// with any other, and applies what it recorded to the wrapper's committed
// state when it commits.
func (b *broken) looseInTx(ctx context.Context, fn func(context.Context, *inbox.MemoryTx) error) error {
	var tx *inbox.MemoryTx
	defer func() {
		if tx != nil {
			b.end(tx)
		}
	}()
	return inbox.NewMemory().InTx(ctx, func(ctx context.Context, t *inbox.MemoryTx) error {
		tx = t
		st := b.state(tx)
		tx.OnCommit(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			for _, id := range st.ids {
				b.ids[id] = true
			}
			for k, s := range st.seqs {
				b.seqs[k] = s
			}
		})
		return fn(ctx, tx)
	})
}

func (b *broken) Record(ctx context.Context, tx *inbox.MemoryTx, ids []string) ([]bool, error) {
	if b.loose() {
		return b.looseRecord(tx, ids)
	}
	given := ids
	switch b.variant {
	case "ids-case-insensitive":
		ids = mapStrings(ids, fold)
	case "ids-truncated":
		ids = mapStrings(ids, func(s string) string { return s[:min(len(s), 64)] })
	}
	st := b.state(tx)
	b.mu.Lock()
	earlier := slices.Clone(st.ids)
	b.mu.Unlock()
	fresh, err := b.Memory.Record(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	st.ids = append(st.ids, ids...)
	for i, id := range ids {
		if b.variant == "own-records-new" && slices.Contains(earlier, id) {
			fresh[i] = true
		}
	}
	for i, id := range ids {
		if b.forgotten[id] {
			fresh[i] = true
		}
	}
	b.mu.Unlock()
	return b.misanswer(given, fresh), nil
}

// misanswer breaks Record's answers as the variant says.
func (b *broken) misanswer(ids []string, fresh []bool) []bool {
	switch b.variant {
	case "record-always-new":
		return slices.Repeat([]bool{true}, len(ids))
	case "batch-repeats-new":
		first := map[string]bool{}
		for i, id := range ids {
			if f, ok := first[id]; ok {
				fresh[i] = f
			} else {
				first[id] = fresh[i]
			}
		}
	case "large-batch-chunks-swapped":
		if len(fresh) > 1000 {
			return slices.Concat(fresh[1000:min(2000, len(fresh))], fresh[:1000], fresh[min(2000, len(fresh)):])
		}
	case "answers-sorted":
		order := make([]int, len(ids))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(ids[a], ids[b]) })
		out := make([]bool, len(ids))
		for i, j := range order {
			out[i] = fresh[j]
		}
		return out
	}
	return fresh
}

// looseRecord checks the committed IDs, gives other transactions time to
// do the same, and only then counts the IDs as this transaction's.
func (b *broken) looseRecord(tx *inbox.MemoryTx, ids []string) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if slices.Contains(ids, "") {
		return nil, fmt.Errorf("inboxtest broken: empty ID: %w", inbox.ErrInvalidMessage)
	}
	st := b.state(tx)
	fresh := make([]bool, len(ids))
	b.mu.Lock()
	for i, id := range ids {
		fresh[i] = !b.ids[id] && !st.idSet[id] && !(b.variant == "dirty-read" && b.uncommitted(id))
		st.idSet[id] = true
	}
	b.mu.Unlock()
	if b.variant == "check-then-insert" {
		time.Sleep(5 * time.Millisecond) // the window between the check and the insert
	}
	b.mu.Lock()
	st.ids = append(st.ids, ids...)
	b.mu.Unlock()
	return fresh, nil
}

// uncommitted reports whether an open transaction recorded id; b.mu is
// held.
func (b *broken) uncommitted(id string) bool {
	for _, st := range b.open {
		if st.idSet[id] {
			return true
		}
	}
	return false
}

func (b *broken) KeySeqs(ctx context.Context, tx *inbox.MemoryTx, keys []string) (map[string]int64, error) {
	if b.loose() {
		return b.looseKeySeqs(ctx, tx, keys, true)
	}
	if b.variant == "keys-case-insensitive" {
		got, err := b.Memory.KeySeqs(ctx, tx, mapStrings(keys, fold))
		out := map[string]int64{}
		for _, k := range keys {
			if s, ok := got[fold(k)]; ok {
				out[k] = s
			}
		}
		return out, err
	}
	got, err := b.Memory.KeySeqs(ctx, tx, keys)
	if err == nil && b.variant == "absent-keys-zero" {
		for _, k := range keys {
			if _, ok := got[k]; !ok {
				got[k] = 0
			}
		}
	}
	return got, err
}

// looseKeySeqs reads the committed numbers; with guard, it takes each
// key's guard (held until the transaction ends) unless the variant leaves
// the key unguarded; then it gives other transactions time to read too.
func (b *broken) looseKeySeqs(ctx context.Context, tx *inbox.MemoryTx, keys []string, guard bool) (map[string]int64, error) {
	st := b.state(tx)
	for _, k := range keys {
		b.mu.Lock()
		_, present := b.seqs[k]
		b.mu.Unlock()
		if !guard || b.variant == "keyseqs-unguarded" || (b.variant == "absent-keys-unguarded" && !present) || slices.Contains(st.locked, k) {
			continue
		}
		select {
		case b.keyLock(k) <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		b.mu.Lock()
		st.locked = append(st.locked, k)
		b.mu.Unlock()
	}
	out := map[string]int64{}
	b.mu.Lock()
	for _, k := range keys {
		if s, ok := b.seqs[k]; ok {
			out[k] = s
		}
	}
	b.mu.Unlock()
	if len(keys) > 0 {
		time.Sleep(5 * time.Millisecond) // the window between the read and the write
	}
	return out, nil
}

func (b *broken) keyLock(k string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.keyLocks[k]
	if l == nil {
		l = make(chan struct{}, 1)
		b.keyLocks[k] = l
	}
	return l
}

func (b *broken) SetKeySeqs(ctx context.Context, tx *inbox.MemoryTx, seqs map[string]int64) error {
	switch {
	case b.loose():
		st := b.state(tx)
		b.mu.Lock()
		defer b.mu.Unlock()
		for k, s := range seqs {
			st.seqs[k] = s
		}
		return nil
	case b.variant == "purge-keeps-keys":
		b.mu.Lock()
		maps.Copy(b.setSeqs, seqs)
		b.mu.Unlock()
	case b.variant == "keys-case-insensitive":
		folded := map[string]int64{}
		for k, s := range seqs {
			folded[fold(k)] = s
		}
		seqs = folded
	}
	return b.Memory.SetKeySeqs(ctx, tx, seqs)
}

// RecordWithKeySeqs implements inbox.KeyRecorder through the wrapper's
// own (broken) Record and KeySeqs; without it, the Memory's would be
// promoted and bypass them.
func (b *broken) RecordWithKeySeqs(ctx context.Context, tx *inbox.MemoryTx, ids, keys []string) ([]bool, map[string]int64, error) {
	fresh, err := b.Record(ctx, tx, ids)
	if err != nil {
		return nil, nil, err
	}
	if b.variant == "recorder-unguarded" {
		seqs, err := b.looseKeySeqs(ctx, tx, keys, false)
		return fresh, seqs, err
	}
	seqs, err := b.KeySeqs(ctx, tx, keys)
	return fresh, seqs, err
}

// Finish implements inbox.Finisher through the wrapper's SetKeySeqs and
// SaveOffsets.
func (b *broken) Finish(ctx context.Context, tx *inbox.MemoryTx, seqs map[string]int64, offsets []inbox.Offset) error {
	if err := b.SetKeySeqs(ctx, tx, seqs); err != nil || len(offsets) == 0 || b.variant == "finish-drops-offsets" {
		return err
	}
	return b.SaveOffsets(ctx, tx, offsets)
}

func (b *broken) SaveOffsets(ctx context.Context, tx *inbox.MemoryTx, offsets []inbox.Offset) error {
	switch b.variant {
	case "offsets-outside-tx":
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, o := range offsets {
			gt := o.Group + "\x00" + o.Topic
			if b.offsets[gt] == nil {
				b.offsets[gt] = map[int32]int64{}
			}
			b.offsets[gt][o.Partition] = o.Next
		}
		return nil
	case "offsets-keep-max":
		offsets = slices.Clone(offsets)
		for i, o := range offsets {
			cur, err := b.Memory.Offsets(ctx, o.Group, o.Topic)
			if err != nil {
				return err
			}
			if n, ok := cur[o.Partition]; ok && n > o.Next {
				offsets[i].Next = n
			}
		}
	case "offsets-any-group":
		b.mu.Lock()
		for _, o := range offsets {
			b.groups[o.Group] = true
		}
		b.mu.Unlock()
	}
	return b.Memory.SaveOffsets(ctx, tx, offsets)
}

func (b *broken) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	switch b.variant {
	case "offsets-outside-tx":
		b.mu.Lock()
		defer b.mu.Unlock()
		out := map[int32]int64{}
		for p, n := range b.offsets[group+"\x00"+topic] {
			out[p] = n
		}
		return out, nil
	case "offsets-any-group":
		b.mu.Lock()
		groups := slices.Collect(maps.Keys(b.groups))
		b.mu.Unlock()
		out := map[int32]int64{}
		for _, g := range groups {
			got, err := b.Memory.Offsets(ctx, g, topic)
			if err != nil {
				return nil, err
			}
			for p, n := range got {
				out[p] = n
			}
		}
		return out, nil
	}
	return b.Memory.Offsets(ctx, group, topic)
}

func (b *broken) Purge(ctx context.Context, before time.Time, limit int) (int, int, error) {
	switch b.variant {
	case "purge-ignores-limit":
		limit = math.MaxInt32
	case "purge-ignores-horizon":
		before = time.Now().Add(1000 * time.Hour)
	case "purge-any-limit":
		if limit < 1 {
			limit = math.MaxInt32
		}
	case "purge-takes-open":
		b.mu.Lock()
		for _, st := range b.open {
			for _, id := range st.ids {
				b.forgotten[id] = true
			}
		}
		b.mu.Unlock()
	case "purge-waits-for-open":
		if err := b.waitNoneOpen(ctx); err != nil {
			return 0, 0, err
		}
	case "purge-keeps-keys":
		return b.purgeIDsOnly(ctx, before, limit)
	}
	return b.Memory.Purge(ctx, before, limit)
}

// Oldest implements inbox.OldestReporter, broken as the variant says.
func (b *broken) Oldest(ctx context.Context) (time.Time, bool, error) {
	at, ok, err := b.Memory.Oldest(ctx)
	if err != nil || !ok {
		return at, ok, err
	}
	switch b.variant {
	case "oldest-stale":
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.oldest == nil {
			b.oldest = &at
		}
		return *b.oldest, true, nil
	case "oldest-is-now":
		return time.Now(), true, nil
	}
	return at, ok, nil
}

// purgeIDsOnly purges, then sets again the key numbers the purge
// removed.
func (b *broken) purgeIDsOnly(ctx context.Context, before time.Time, limit int) (int, int, error) {
	ids, _, err := b.Memory.Purge(ctx, before, limit)
	if err != nil {
		return ids, 0, err
	}
	b.mu.Lock()
	seqs := maps.Clone(b.setSeqs)
	b.mu.Unlock()
	err = b.Memory.InTx(ctx, func(ctx context.Context, tx *inbox.MemoryTx) error {
		kept, err := b.Memory.KeySeqs(ctx, tx, slices.Collect(maps.Keys(seqs)))
		if err != nil {
			return err
		}
		for k := range kept {
			delete(seqs, k)
		}
		return b.Memory.SetKeySeqs(ctx, tx, seqs)
	})
	return ids, 0, err
}

// waitNoneOpen waits until no transaction is in progress.
func (b *broken) waitNoneOpen(ctx context.Context) error {
	for {
		b.mu.Lock()
		n := len(b.open)
		b.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func fold(s string) string { return strings.ToLower(strings.TrimRight(s, " ")) }

func mapStrings(in []string, f func(string) string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = f(s)
	}
	return out
}
