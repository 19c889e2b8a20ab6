package ops

import (
	"context"
	"time"

	"github.com/outboxrelay/outbox"
)

// StoreHealth is what a store tells of its upkeep: the figures and
// warnings of its [outbox.HealthChecker] and the oldest entry of its
// archive ([outbox.ArchiveJanitor]).
type StoreHealth struct {
	// Health is the store's reading; nil when the store does not
	// implement outbox.HealthChecker, or when reading it failed.
	Health *outbox.Health
	// Archive is the store's archive; nil when the store does not
	// implement outbox.ArchiveJanitor, or when reading it failed.
	Archive *ArchiveState
}

// ArchiveState is the archive of a store, in [StoreHealth].
type ArchiveState struct {
	// Empty reports an archive that holds no entry; OldestSent and
	// OldestAge are then zero.
	Empty bool
	// OldestSent is when the oldest archived entry was sent.
	OldestSent time.Time
	// OldestAge is now minus OldestSent, 0 when OldestSent is after now
	// (the store's clock ahead of ours).
	OldestAge time.Duration
}

// ReadHealth reads store's health and its archive's oldest entry, each
// when the store implements the interface that reports it, and measures
// the archive's age from now. It changes nothing in the store. It reads
// both even when one fails, and returns the first error as the store gave
// it, with what the other reading found.
func ReadHealth(ctx context.Context, store outbox.Store, now time.Time) (StoreHealth, error) {
	var sh StoreHealth
	var first error
	if j, ok := store.(outbox.ArchiveJanitor); ok {
		sent, found, err := j.OldestArchived(ctx)
		switch {
		case err != nil:
			first = err
		case !found:
			sh.Archive = &ArchiveState{Empty: true}
		default:
			sh.Archive = &ArchiveState{OldestSent: sent, OldestAge: max(0, now.Sub(sent))}
		}
	}
	if hc, ok := store.(outbox.HealthChecker); ok {
		h, err := hc.Health(ctx)
		if err != nil && first == nil {
			first = err
		}
		if err == nil {
			sh.Health = &h
		}
	}
	return sh, first
}
