package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// maxMemberText is how many bytes of a member's Host and Version are kept.
const maxMemberText = 255

// Heartbeat records m as a live relay until ttl after the backend's clock
// (with its Host and Version cut to 255 bytes, at a UTF-8 boundary, and
// Renewed the clock's now), drops expired records and returns the live
// ones sorted by owner. See [outbox.Membership].
func (b *Backend) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if err := outbox.CheckMember(len(b.parts), m, ttl); err != nil {
		return nil, fmt.Errorf("memory: Heartbeat: %w", err)
	}
	now := b.clock()
	m.Partitions = slices.Clone(m.Partitions)
	m.Host = strings.Clone(outbox.TruncateUTF8(m.Host, maxMemberText))
	m.Version = strings.Clone(outbox.TruncateUTF8(m.Version, maxMemberText))
	m.Started = m.Started.Round(0)
	m.Expires = now.Add(ttl)
	m.Renewed = now
	b.members[m.Owner] = m
	out := make([]outbox.Member, 0, len(b.members))
	for owner, rec := range b.members {
		if !now.Before(rec.Expires) {
			delete(b.members, owner)
			continue
		}
		rec.Partitions = slices.Clone(rec.Partitions)
		out = append(out, rec)
	}
	slices.SortFunc(out, func(x, y outbox.Member) int { return strings.Compare(x.Owner, y.Owner) })
	return out, nil
}

// Leave deletes the record of owner. See [outbox.Membership].
func (b *Backend) Leave(ctx context.Context, owner string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	delete(b.members, owner)
	return nil
}
