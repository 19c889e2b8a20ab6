package mysqloutbox

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
)

// PurgeArchive deletes archived entries sent before the given time, oldest
// first, in batches of at most batchSize rows: it calls
// [Backend.PurgeArchiveBatch] until a batch removes fewer than batchSize
// rows or ctx is done, and reports how many rows it deleted. Each batch is
// its own short transaction that skips rows other transactions hold, so a
// large purge never holds many row locks for long nor keeps an old read
// view that holds back InnoDB's purge of old row versions. A relay with
// RelayOptions.ArchiveRetention runs the same batches by itself; this is
// for a purge by hand ("outbox purge"). It is safe to run concurrently
// with relays and with itself. A non-positive batchSize is rejected with
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
		n, more, err := b.PurgeArchiveBatch(ctx, before, batchSize)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}
