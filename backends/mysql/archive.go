package mysqloutbox

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
)

// PurgeArchive deletes archived entries sent before the given time, oldest
// first, in batches of at most batchSize rows, each batch its own short
// statement (queries/purge_archive.sql: a DELETE ... ORDER BY sent_at
// LIMIT through the sent_at index) and so its own transaction, so a large
// purge never holds many row locks for long nor keeps an old read view
// that holds back InnoDB's purge of old row versions. It stops when a
// batch deletes fewer than batchSize rows or ctx is done, and reports how
// many rows it deleted. Run it periodically (e.g. hourly) when
// Options.Archive is set; it is safe to run concurrently with relays and
// with itself. A non-positive batchSize is rejected with
// [outbox.ErrInvalidArgument]; after Close it returns [outbox.ErrClosed].
func (b *Backend) PurgeArchive(ctx context.Context, before time.Time, batchSize int) (int64, error) {
	const op = "PurgeArchive"
	if err := b.checkOpen(op); err != nil {
		return 0, err
	}
	if batchSize <= 0 {
		return 0, fmt.Errorf("mysqloutbox: %s: batchSize is %d, must be positive: %w", op, batchSize, outbox.ErrInvalidArgument)
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := b.relay.purge.ExecContext(ctx, toMicros(before), batchSize)
		if err != nil {
			return total, b.relayErr(op, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, b.relayErr(op, err)
		}
		total += n
		if n < int64(batchSize) {
			return total, nil
		}
	}
}
