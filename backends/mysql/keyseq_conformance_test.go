package mysqloutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/conformance"
	"github.com/outboxrelay/outbox/internal/keyseqtest"
)

// keySeqStripped is a Backend with Options.KeySequence whose reads check
// and then drop the key sequence header, so that the conformance suite,
// which compares the headers it gets back with those it appended, runs
// with the option on: the option must change nothing but that header.
type keySeqStripped struct{ *mysqloutbox.Backend }

// stripKeySeq checks and removes the key sequence header (see
// keyseqtest.Strip).
func stripKeySeq(es []outbox.Entry) error { return keyseqtest.Strip(es, false) }

func (b keySeqStripped) FindPendingBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.Entry, error) {
	es, err := b.Backend.FindPendingBatch(ctx, l, limit)
	if err == nil {
		err = stripKeySeq(es)
	}
	return es, err
}

func (b keySeqStripped) FetchBatch(ctx context.Context, l outbox.Lease, limit int) (outbox.Batch, error) {
	batch, err := b.Backend.FetchBatch(ctx, l, limit)
	if err == nil {
		err = stripKeySeq(batch.Entries)
	}
	return batch, err
}

func (b keySeqStripped) FetchNext(ctx context.Context, l outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	batch, err := b.Backend.FetchNext(ctx, l, limit, inFlight)
	if err == nil {
		err = stripKeySeq(batch.Entries)
	}
	return batch, err
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

func (b keySeqStripped) ExportBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	infos, err := b.Backend.ExportBatch(ctx, l, limit)
	if err == nil {
		err = keyseqtest.StripInfos(infos, stripKeySeq)
	}
	return infos, err
}

// Import gives each keyed entry without one the key sequence header an
// entry exported from a numbering outbox carries (Import keeps headers as
// they were and numbers nothing), so the reads above find it.
func (b keySeqStripped) Import(ctx context.Context, infos []outbox.EntryInfo) (int, error) {
	return b.Backend.Import(ctx, keyseqtest.NumberImports(infos))
}

// keySeqHarness runs the suite on a keySeqStripped backend; it commits
// through Backend.Commit, which wakes the relays (the Notifier cases).
type keySeqHarness struct {
	b    *mysqloutbox.Backend
	db   *sql.DB
	opts mysqloutbox.Options
}

func (h keySeqHarness) Backend() outbox.Backend[*sql.Tx]             { return keySeqStripped{h.b} }
func (h keySeqHarness) Begin(ctx context.Context) (*sql.Tx, error)   { return h.db.BeginTx(ctx, nil) }
func (h keySeqHarness) Commit(_ context.Context, tx *sql.Tx) error   { return h.b.Commit(tx) }
func (h keySeqHarness) Rollback(_ context.Context, tx *sql.Tx) error { return tx.Rollback() }

func (h keySeqHarness) Reopen(ctx context.Context, partitions int) (outbox.Store, error) {
	o := h.opts
	o.Partitions = partitions
	b, err := mysqloutbox.New(ctx, h.db, o)
	if err != nil {
		return nil, err
	}
	return keySeqStripped{b}, nil
}

// Corruptions names the columns Corrupt damages (conformance.Corrupter).
func (h keySeqHarness) Corruptions() []string {
	return []string{"headers column", "empty topic column"}
}

// Corrupt damages the row of id with a real UPDATE: bytes the header
// codec does not accept (a length running past the end), or an empty
// topic.
func (h keySeqHarness) Corrupt(ctx context.Context, id, how string) error {
	var set string
	switch how {
	case "headers column":
		set = "headers = X'DEADBEEF00FF'"
	case "empty topic column":
		set = "topic = ''"
	default:
		return fmt.Errorf("harness: unknown corruption %q", how)
	}
	var n int
	if err := h.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox WHERE id = ?", id).Scan(&n); err != nil || n != 1 {
		return fmt.Errorf("harness: no row has id %q (%v)", id, err)
	}
	_, err := h.db.ExecContext(ctx, "UPDATE outbox SET "+set+" WHERE id = ?", id)
	return err
}

var _ conformance.Corrupter = keySeqHarness{}

// TestConformanceKeySequence runs the conformance suite with
// Options.KeySequence on (the header checked and dropped on reads).
func TestConformanceKeySequence(t *testing.T) {
	t.Parallel()
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[*sql.Tx] {
		o := mysqloutbox.Options{KeySequence: true, Partitions: cfg.Partitions, Archive: cfg.Archive}
		b, db := newBackend(t, o)
		o.Partitions = b.Partitions()
		return keySeqHarness{b: b, db: db, opts: o}
	})
}
