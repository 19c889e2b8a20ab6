package pgoutbox

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
)

// NewRowLocking is New with FOR UPDATE SKIP LOCKED added to the claim
// query, for the benchmark that compares the two.
func NewRowLocking(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Backend, error) {
	return newBackend(ctx, pool, opts, "FOR UPDATE OF o SKIP LOCKED")
}

// FindQuery is the rendered FindPendingBatch statement.
func (b *Backend) FindQuery() string { return b.qFind }

// FindNextQuery is the rendered FetchNext statement ($5 the IDs in flight).
func (b *Backend) FindNextQuery() string { return b.qFindNext }

// SetAcquireQuery replaces the AcquireLease statement (before any use of
// b) with q, rendered like the embedded queries ({lease} and the other
// table tokens), for the test and benchmark that compare it with the
// earlier upsert.
func (b *Backend) SetAcquireQuery(q string) { b.qAcquire = b.render(q) }

// PartitionStatsQuery is the rendered PartitionStats statement ($1 the
// partition count).
func (b *Backend) PartitionStatsQuery() string { return b.qPartitionStats }

// ParkedQuery is the rendered Parked statement ($1 after, $2 limit).
func (b *Backend) ParkedQuery() string { return b.qParked }

// EntriesQuery is the rendered Entries statement of state ($1 after, $2
// limit, $3..$7 the filter).
func (b *Backend) EntriesQuery(state outbox.EntryState) string {
	return b.qEntries[slices.Index(entryStates[:], state)]
}
