package redisinbox

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/inbox"
)

var _ inbox.OldestReporter = (*Store)(nil)

// Oldest implements [inbox.OldestReporter] in one round trip: a pipeline
// of ZRANGE 0 0 WITHSCORES of "<prefix>:ids" and of "<prefix>:seqs" (each
// sorted set's first member), the earlier of the two scores, in
// milliseconds of the server's clock (TIME, as Record and SetKeySeqs
// stamp them).
func (s *Store) Oldest(ctx context.Context) (time.Time, bool, error) {
	var ids, seqs *redis.ZSliceCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		ids = p.ZRangeWithScores(ctx, s.k.ids, 0, 0)
		seqs = p.ZRangeWithScores(ctx, s.k.seqs, 0, 0)
		return nil
	})
	if err != nil {
		return time.Time{}, false, wrap(ctx, "Oldest", err)
	}
	var oldest float64
	ok := false
	for _, zs := range [][]redis.Z{ids.Val(), seqs.Val()} {
		if len(zs) > 0 && (!ok || zs[0].Score < oldest) {
			oldest, ok = zs[0].Score, true
		}
	}
	if !ok {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(int64(oldest)), true, nil
}
