package pgoutbox

import "github.com/jackc/pgx/v5/pgxpool"

// NewRowLocking is New with FOR UPDATE SKIP LOCKED added to the claim
// query, for the benchmark that compares the two.
func NewRowLocking(pool *pgxpool.Pool, opts Options) (*Backend, error) {
	return newBackend(pool, opts, "FOR UPDATE OF o SKIP LOCKED")
}

// FindQuery is the rendered FindPendingBatch statement.
func (b *Backend) FindQuery() string { return b.qFind }
