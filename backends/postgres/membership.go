package pgoutbox

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/outboxrelay/outbox"
)

// Heartbeat records m as a live relay of the outbox's fleet until ttl from
// now by the database's clock, deletes the records of other relays that
// have expired, and returns every live record, m's included, sorted by
// Owner, with Expires and Renewed from the database: one statement (one
// round trip) on "<table>_member". m.Host and m.Version are stored cut
// to 255 bytes (at a character boundary; NUL bytes and invalid UTF-8
// replaced by U+FFFD), m.Started as given (to the microsecond). Besides the checks of [outbox.CheckMember], m.Owner
// must be valid UTF-8 without NUL bytes. m.Partitions is not retained;
// the returned slices are the caller's. Safe for concurrent use; two
// heartbeats never wait on each other except when one is deleting the
// other's expired record. See [outbox.Membership].
func (b *Backend) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	const op = "Heartbeat"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	if err := outbox.CheckMember(b.opts.Partitions, m, ttl); err != nil {
		return nil, argErr(op, err)
	}
	if err := checkOwner(m.Owner); err != nil {
		return nil, argErr(op, err)
	}
	if m.MaxPartitions > math.MaxInt32 {
		return nil, fmt.Errorf("pgoutbox: %s: member MaxPartitions is %d; at most %d fits the member table: %w", op, m.MaxPartitions, math.MaxInt32, outbox.ErrInvalidArgument)
	}
	parts := make([]int32, len(m.Partitions))
	for i, p := range m.Partitions {
		parts[i] = int32(p)
	}
	rows, err := b.pool.Query(ctx, b.qHeartbeat, m.Owner, parts, int32(m.MaxPartitions), micros(ttl),
		cutText(m.Host, maxMemberText), cutText(m.Version, maxMemberText), tstz(m.Started))
	if err != nil {
		return nil, b.interpretError(op, err)
	}
	return b.scanMembers(op, rows)
}

// Leave deletes the member record of owner in one statement. Leaving
// twice, or without a record, is a no-op that returns nil. See
// [outbox.Membership].
func (b *Backend) Leave(ctx context.Context, owner string) error {
	const op = "Leave"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if owner == "" || checkOwner(owner) != nil {
		return nil // no record can have this owner
	}
	_, err := b.pool.Exec(ctx, b.qLeave, owner)
	return b.interpretError(op, err)
}
