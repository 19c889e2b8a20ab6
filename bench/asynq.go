package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// asynq measures asynq on the same Redis (logical database -redis-db):
// Enqueue with 8 callers, and a no-op handler with Concurrency 100
// draining the backlog.
func (s *Suite) asynq(ctx context.Context) error {
	n := s.cfg.N
	msgs := newMessages(n, 5)
	client := asynq.NewClientFromRedisClient(s.rdb)
	enq, drain := s.sr("asynq.enq"), s.sr("asynq.drain")
	for run := range s.thisRun() {
		if err := deleteKeys(ctx, s.rdb, "asynq:*"); err != nil {
			return err
		}
		el, err := parallel(ctx, Callers, n, 1, func(ctx context.Context, lo, hi int) error {
			_, err := client.EnqueueContext(ctx, asynq.NewTask("bench", msgs.payload[lo]))
			return err
		})
		if err != nil {
			return fmt.Errorf("asynq Enqueue: %w", err)
		}
		if got, err := s.rdb.LLen(ctx, "asynq:{default}:pending").Result(); err != nil || got != int64(n) {
			return fmt.Errorf("asynq Enqueue: count wrong: %d pending after %d enqueues (%v)", got, n, err)
		}
		enq.add(rate(n, el), nil)

		tr := newTracker(n)
		srv := asynq.NewServerFromRedisClient(s.rdb, asynq.Config{
			Concurrency:     100,
			LogLevel:        asynq.FatalLevel,
			ShutdownTimeout: 10 * time.Second,
		})
		start := time.Now()
		if err := srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
			tr.markPayload(t.Payload())
			return nil
		})); err != nil {
			return fmt.Errorf("asynq server: %w", err)
		}
		werr := tr.wait(ctx, drainTimeout(n))
		el = time.Since(start)
		srv.Shutdown()
		c := tr.counts_()
		if werr != nil {
			s.fail("asynq drain run %d: %v", run+1, werr)
		} else if err := c.check(true); err != nil {
			s.fail("asynq drain run %d: %v", run+1, err)
		}
		drain.add(rate(n, el), &c)
	}
	if err := deleteKeys(ctx, s.rdb, "asynq:*"); err != nil {
		return err
	}
	s.record("asynq.enqueue", fmt.Sprintf("Redis append, 1 entry/tx, %d callers", Callers), "asynq Enqueue", "entries/s", true, enq, "")
	s.record("asynq.drain", s.drainTitle("Redis", "no-op sink"), "asynq no-op handler", "entries/s", true, drain, "Concurrency 100")
	return nil
}
