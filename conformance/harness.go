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
}

// NewHarness makes a fresh Harness for one subtest. It registers its own
// cleanup with t.Cleanup and fails t (t.Fatal) if the backend cannot be
// set up.
type NewHarness[Tx any] func(t *testing.T, cfg Config) Harness[Tx]
