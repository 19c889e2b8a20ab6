package move

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
)

// Counts are the entries of an outbox by state.
type Counts struct {
	// Due counts pending entries whose next attempt time has come.
	Due int64
	// Waiting counts pending entries that are not due yet: scheduled
	// (NotBefore ahead) or waiting for a retry.
	Waiting int64
	// Parked counts parked entries.
	Parked int64
}

// Total is every entry counted.
func (c Counts) Total() int64 { return c.Due + c.Waiting + c.Parked }

func (c Counts) String() string {
	return fmt.Sprintf("%d entries (%d due, %d waiting, %d parked)", c.Total(), c.Due, c.Waiting, c.Parked)
}

// Count reports the entries of s by state ([outbox.Inspector.Stats]).
func Count(ctx context.Context, s outbox.Store) (Counts, error) {
	in, ok := s.(outbox.Inspector)
	if !ok {
		return Counts{}, missing(s, "outbox.Inspector", "count its entries")
	}
	st, err := in.Stats(ctx)
	if err != nil {
		return Counts{}, err
	}
	return Counts{Due: st.Due, Waiting: max(0, st.Pending-st.Due), Parked: st.Parked}, nil
}

// Progress is what [Options.Progress] is given.
type Progress struct {
	// Moved counts the entries this run added to the destination so far;
	// Skipped those the destination already held (a resumed move).
	Moved, Skipped int64
	// Total is how many entries the source held when the run began.
	Total int64
	// PartitionsDone of Partitions source partitions are empty.
	PartitionsDone, Partitions int
	// Waiting is set when a call reports a wait for a source partition's
	// lease held by another owner (a relay of the source still running).
	Waiting *LeaseWait
}

// LeaseWait is a wait for a source partition's lease.
type LeaseWait struct {
	Partition int
	// Owner holds the lease until Expires (by the store's clock); both are
	// zero when the store does not report them
	// ([outbox.PartitionInspector]).
	Owner   string
	Expires time.Time
}
