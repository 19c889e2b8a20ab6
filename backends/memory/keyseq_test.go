package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/conformance"
	"github.com/outboxrelay/outbox/internal/keyseqtest"
)

// drainKeySeq fetches and marks sent everything of partition 0 and
// returns each entry's key sequence header by ID, and the fetched entries.
func drainKeySeq(t *testing.T, b *memory.Backend) (map[string]string, []outbox.Entry) {
	t.Helper()
	ctx := context.Background()
	l, err := b.AcquireLease(ctx, 0, "o", time.Minute)
	require.NoError(t, err)
	m := map[string]string{}
	var all []outbox.Entry
	for {
		got, err := b.FindPendingBatch(ctx, l, 50)
		require.NoError(t, err)
		if len(got) == 0 {
			return m, all
		}
		ids := make([]string, len(got))
		for i, e := range got {
			ids[i] = e.ID
			m[e.ID] = e.Headers[outbox.HeaderKeySeq]
		}
		require.NoError(t, b.MarkSent(ctx, l, ids))
		all = append(all, got...)
	}
}

func TestKeySequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NumbersCommittedEntriesOfEachKey", func(t *testing.T) {
		t.Parallel()
		b := memory.New(memory.Options{KeySequence: true})
		in := outbox.Entry{ID: "a1", Topic: "t", Key: "a", Headers: map[string]string{"h": "v"}}
		require.NoError(t, b.Append(ctx, in, outbox.Entry{ID: "n1", Topic: "t"}, outbox.Entry{ID: "b1", Topic: "t", Key: "b"}))
		require.Equal(t, map[string]string{"h": "v"}, in.Headers, "the caller's map is not changed")

		tx := b.Begin() // rolled back: no gap
		require.NoError(t, b.AppendInTx(ctx, tx, outbox.Entry{ID: "gone", Topic: "t", Key: "a"}))
		require.NoError(t, tx.Rollback())

		tx = b.Begin() // a re-append and a repeat take no number
		require.NoError(t, b.AppendInTx(ctx, tx, outbox.Entry{ID: "a1", Topic: "t", Key: "a"}, outbox.Entry{ID: "a2", Topic: "t", Key: "a"}))
		require.NoError(t, b.AppendInTx(ctx, tx, outbox.Entry{ID: "a2", Topic: "t", Key: "a"}, outbox.Entry{ID: "a3", Topic: "t", Key: "a"}))
		require.NoError(t, tx.Commit())

		info, err := b.Lookup(ctx, "a3")
		require.NoError(t, err)
		require.Equal(t, "3", info.Headers[outbox.HeaderKeySeq])

		got, all := drainKeySeq(t, b)
		require.Equal(t, map[string]string{"a1": "1", "a2": "2", "a3": "3", "b1": "1", "n1": ""}, got)
		for _, e := range all {
			if e.ID == "a1" {
				require.Equal(t, map[string]string{"h": "v", outbox.HeaderKeySeq: "1"}, e.Headers)
			}
			if e.ID == "n1" {
				require.Nil(t, e.Headers)
			}
		}
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "a4", Topic: "t", Key: "a"}))
		got, _ = drainKeySeq(t, b)
		require.Equal(t, map[string]string{"a4": "4"}, got)
	})

	t.Run("CallerSetHeaderIsRefused", func(t *testing.T) {
		t.Parallel()
		b := memory.New(memory.Options{KeySequence: true})
		err := b.Append(ctx, outbox.Entry{ID: "x", Topic: "t", Key: "k", Headers: map[string]string{outbox.HeaderKeySeq: "1"}})
		require.ErrorIs(t, err, outbox.ErrInvalidEntry)
		require.ErrorContains(t, err, outbox.HeaderKeySeq)
	})

	t.Run("OffLeavesHeadersAlone", func(t *testing.T) {
		t.Parallel()
		b := memory.New(memory.Options{})
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x", Topic: "t", Key: "k", Headers: map[string]string{outbox.HeaderKeySeq: "mine"}}, outbox.Entry{ID: "y", Topic: "t", Key: "k"}))
		got, _ := drainKeySeq(t, b)
		require.Equal(t, map[string]string{"x": "mine", "y": ""}, got)
	})

	t.Run("ConcurrentAppenders", func(t *testing.T) {
		t.Parallel()
		b := memory.New(memory.Options{KeySequence: true})
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 3))
				for i := range 50 {
					tx := b.Begin()
					require.NoError(t, b.AppendInTx(ctx, tx, outbox.Entry{ID: fmt.Sprint(w, "-", i), Topic: "t", Key: "hot"}))
					if r.IntN(3) == 0 {
						require.NoError(t, tx.Rollback())
					} else {
						require.NoError(t, tx.Commit())
					}
				}
			})
		}
		wg.Wait()
		_, all := drainKeySeq(t, b)
		var ns []int64
		for _, e := range all {
			n, ok := e.KeySeq()
			require.True(t, ok)
			ns = append(ns, n)
		}
		require.True(t, slices.IsSorted(ns))
		for i, n := range ns {
			require.Equal(t, int64(i+1), n)
		}
	})
}

// keySeqStripped is a Backend with Options.KeySequence whose reads check
// and then drop the key sequence header, so that the conformance suite,
// which compares the headers it gets back with those it appended, runs
// with the option on: the option must change nothing but that header.
type keySeqStripped struct{ *memory.Backend }

// stripKeySeq checks and removes the key sequence header (see
// keyseqtest.Strip).
func stripKeySeq(es []outbox.Entry) error { return keyseqtest.Strip(es, true) }

func (b keySeqStripped) FindPendingBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.Entry, error) {
	es, err := b.Backend.FindPendingBatch(ctx, l, limit)
	if err == nil {
		err = stripKeySeq(es)
	}
	return es, err
}

func (b keySeqStripped) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	es, err := b.Backend.Parked(ctx, after, limit)
	if err == nil {
		err = stripKeySeq(es)
	}
	return es, err
}

func (b keySeqStripped) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	info, err := b.Backend.Lookup(ctx, id)
	if err == nil {
		es := []outbox.Entry{info.Entry}
		err = stripKeySeq(es)
		info.Entry = es[0]
	}
	return info, err
}

func (b keySeqStripped) ExportBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	infos, err := b.Backend.ExportBatch(ctx, l, limit)
	if err == nil {
		err = keyseqtest.StripInfos(infos, stripKeySeq)
	}
	return infos, err
}

func (b keySeqStripped) Entries(ctx context.Context, state outbox.EntryState, f outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	infos, err := b.Backend.Entries(ctx, state, f, after, limit)
	if err == nil {
		err = keyseqtest.StripInfos(infos, stripKeySeq)
	}
	return infos, err
}

func (b keySeqStripped) BlockedKeys(ctx context.Context, f outbox.ListFilter, after outbox.BlockedKey, limit int) ([]outbox.BlockedKey, error) {
	keys, err := b.Backend.BlockedKeys(ctx, f, after, limit)
	if err == nil {
		err = keyseqtest.StripBlocked(keys, stripKeySeq)
	}
	return keys, err
}

// Import gives each keyed entry without one the key sequence header an
// entry exported from a numbering outbox carries (Import keeps headers as
// they were and numbers nothing), so the reads above find it.
func (b keySeqStripped) Import(ctx context.Context, infos []outbox.EntryInfo) (int, error) {
	return b.Backend.Import(ctx, keyseqtest.NumberImports(infos))
}

type keySeqHarness struct{ b *memory.Backend }

func (h keySeqHarness) Backend() outbox.Backend[*memory.Tx]             { return keySeqStripped{h.b} }
func (h keySeqHarness) Begin(context.Context) (*memory.Tx, error)       { return h.b.Begin(), nil }
func (h keySeqHarness) Commit(_ context.Context, tx *memory.Tx) error   { return tx.Commit() }
func (h keySeqHarness) Rollback(_ context.Context, tx *memory.Tx) error { return tx.Rollback() }

// TestConformanceKeySequence runs the conformance suite with
// Options.KeySequence on (the header checked and dropped on reads).
func TestConformanceKeySequence(t *testing.T) {
	t.Parallel()
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[*memory.Tx] {
		return keySeqHarness{memory.New(memory.Options{Partitions: cfg.Partitions, KeySequence: true})}
	})
}
