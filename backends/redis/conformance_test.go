package redisoutbox

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/conformance"
)

// harness runs the conformance suite on one backend with its own prefix.
type harness struct {
	b *Backend
	c redis.UniversalClient
	// plain makes Begin return a non-transactional pipeline: on Redis
	// Cluster a MULTI cannot span the slots of several partitions, so
	// there each partition's entries are atomic on their own.
	plain bool
}

var (
	_ conformance.Reopener  = (*harness)(nil)
	_ conformance.Corrupter = (*harness)(nil)
)

func (h *harness) Backend() outbox.Backend[redis.Pipeliner] { return h.b }

func (h *harness) Begin(context.Context) (redis.Pipeliner, error) {
	if h.plain {
		return h.c.Pipeline(), nil
	}
	return h.c.TxPipeline(), nil
}

// Commit runs EXEC and checks its result with CheckExec, as the docs tell
// callers to (it maps a sealed outbox's refusal to outbox.ErrSealed).
func (h *harness) Commit(ctx context.Context, tx redis.Pipeliner) error {
	return CheckExec(tx.Exec(ctx))
}

func (h *harness) Rollback(_ context.Context, tx redis.Pipeliner) error {
	tx.Discard()
	return nil
}

// Reopen opens the harness's outbox again through New, configured with
// partitions (0: read the count stored with the outbox), as another
// process would (conformance.Reopener). The suite closes the store.
func (h *harness) Reopen(ctx context.Context, partitions int) (outbox.Store, error) {
	b, err := New(ctx, h.c, Options{Prefix: h.b.opts.Prefix, Partitions: partitions})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Corruptions are the ways Corrupt damages an entry (conformance.Corrupter).
// They must apply to any entry the suite appends, headers or not.
func (h *harness) Corruptions() []string {
	return []string{"truncated value", "unknown format version", "empty topic", "key length past the end", "header count past the end"}
}

// Corrupt writes the entry's hash field by hand (HSET) in the named way
// (see corruptions in corrupt_test.go).
func (h *harness) Corrupt(ctx context.Context, id, how string) error {
	return corrupt(ctx, h.c, h.b, id, how)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[redis.Pipeliner] {
				_, cluster := c.(*redis.ClusterClient)
				return &harness{
					b:     newBackend(t, c, Options{Partitions: cfg.Partitions}),
					c:     c,
					plain: cluster && cfg.Partitions > 1,
				}
			})
		})
	}
}
