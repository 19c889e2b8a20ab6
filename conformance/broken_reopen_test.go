package conformance_test

import (
	"context"
	"errors"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// reopenVariants break the brokenHarness's Reopen (the constructor a
// backend that stores its partition count would have).
var reopenVariants = []variant{
	{"reopen-accepts-any-count", "the harness's Reopen (the backend's constructor) accepts any partition count and reports it", []string{"PartitionCount/ReopenWithOtherCountRefused"}},
	{"reopen-zero-means-one", "Reopen with 0 partitions opens the outbox with the default of 1 instead of the stored count", []string{"PartitionCount/ReopenWithZeroReadsStoredCount"}},
	{"reopen-refuses-existing-outbox", "Reopen fails on an outbox that already exists, whatever the count", []string{"PartitionCount/ReopenWithSameCount", "PartitionCount/ReopenWithZeroReadsStoredCount"}},
	{"reopen-opens-empty-outbox", "Reopen opens a new, empty outbox with the stored count instead of the harness's", []string{"PartitionCount/EntriesFetchedThroughReopenedStore"}},
}

func (h brokenHarness) Reopen(ctx context.Context, partitions int) (outbox.Store, error) {
	stored := h.mem.Partitions()
	switch h.variant {
	case "reopen-accepts-any-count":
		if partitions == 0 {
			partitions = stored
		}
		return &reopenedStore{Store: h.mem, partitions: partitions}, nil
	case "reopen-zero-means-one":
		if partitions == 0 {
			partitions = 1
		}
	case "reopen-refuses-existing-outbox":
		return nil, errors.New("memory (simulated reopen): the outbox already exists")
	case "reopen-opens-empty-outbox":
		if partitions != 0 && partitions != stored {
			break
		}
		fresh := memory.New(memory.Options{Partitions: stored})
		return &reopenedStore{Store: fresh, partitions: stored, closeStore: true}, nil
	}
	return h.reopenHarness.Reopen(ctx, partitions)
}
