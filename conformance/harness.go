package conformance

import (
	"context"
	"testing"

	"github.com/outboxrelay/outbox"
)

// Harness connects the suite to one fresh instance of the backend under
// test. The suite makes a new Harness for every subtest, possibly in
// parallel with others, so each must be isolated: its own schema, key
// prefix, database or namespace, empty at the start. A Harness may also
// implement [Reopener].
type Harness[Tx any] interface {
	// Backend returns the backend under test. The suite closes it at the
	// end of the subtest; the harness releases everything else (pools,
	// clients, schemas) through t.Cleanup.
	Backend() outbox.Backend[Tx]
	// Begin starts a transaction for Backend().AppendInTx.
	Begin(ctx context.Context) (Tx, error)
	// Commit commits a transaction from Begin.
	Commit(ctx context.Context, tx Tx) error
	// Rollback rolls back a transaction from Begin.
	Rollback(ctx context.Context, tx Tx) error
}

// Reopener is an optional interface of a Harness whose backend stores its
// partition count with the outbox (see outbox.Store.Partitions).
type Reopener interface {
	// Reopen opens the harness's outbox again through the backend's
	// constructor, configured with partitions (0: read the count from the
	// store). The suite closes the returned store.
	Reopen(ctx context.Context, partitions int) (outbox.Store, error)
}

// Config is what a subtest asks of the backend it gets.
type Config struct {
	// Partitions is the number of partitions the backend must be
	// configured with (Store.Partitions must report it). At least 1.
	Partitions int
	// Archive asks for a backend that keeps sent entries in an archive
	// (an [outbox.ArchiveJanitor]: pgoutbox and mysqloutbox with
	// Options.Archive). Only the "ArchiveJanitor" cases set it. They skip
	// when the backend is not an ArchiveJanitor, and fail when it is one
	// but MarkSent archived nothing: a harness whose backend can archive
	// must turn its archive on when Archive is set.
	Archive bool
}

// NewHarness makes a fresh Harness for one subtest. It registers its own
// cleanup with t.Cleanup and fails t (t.Fatal) if the backend cannot be
// set up.
type NewHarness[Tx any] func(t *testing.T, cfg Config) Harness[Tx]

// Corrupter is an optional interface of a Harness whose backend stores
// entries in a form that can be changed by hand so that it no longer
// decodes, or no longer names a topic (a column, a hash field, a value of
// the wrong shape). The suite's Corrupt cases damage entries through it
// and check that the backend parks each one with a reason and keeps
// serving the partition, reports the park when it implements
// outbox.BatchFetcher, and refuses to requeue it when it implements
// outbox.Inspector.
type Corrupter interface {
	// Corruptions names the ways Corrupt can damage a stored entry, such
	// as "headers column" (at least one). The suite runs its Corrupt
	// cases once for each.
	Corruptions() []string
	// Corrupt damages the stored entry with the given ID, pending and
	// never attempted, in the named way, in place: the entry keeps its ID
	// and its place in its partition's order, and the backend can no
	// longer decode it or no longer publish it.
	Corrupt(ctx context.Context, id, how string) error
}
