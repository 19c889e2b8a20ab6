package pgoutbox

import "github.com/jackc/pgx/v5/pgxpool"

// NewRowLocking is New with FOR UPDATE SKIP LOCKED added to the claim
// query, for the benchmark that compares the two.
func NewRowLocking(pool *pgxpool.Pool, opts Options) (*Backend, error) {
	return newBackend(pool, opts, "FOR UPDATE OF o SKIP LOCKED")
}

// FindQuery is the rendered FindPendingBatch statement.
func (b *Backend) FindQuery() string { return b.qFind }

// Table is the quoted name of the outbox table.
func (b *Backend) Table() string { return b.names.outbox }

// PointLocation makes MarkSent believe that the row of entry id is where
// the row of entry other is (as if id's ctid had been reused by other's
// row), for the test that a ctid alone never deletes a row.
func (b *Backend) PointLocation(partition int, id, other string) {
	l := &b.locs[partition]
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byID[id] = l.byID[other]
}
