package redisinbox_test

import (
	"testing"
	"time"

	"github.com/outboxrelay/outbox/backends/redis/redisinbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/inbox/inboxtest"
)

// TestConformance runs the inbox store conformance suite on a single node
// and on Redis Cluster, each case under a prefix of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			inboxtest.Run(t, inboxtest.Harness[*redisinbox.Tx]{
				New: func(t *testing.T) inbox.Store[*redisinbox.Tx] { return newStore(t, c) },
				Backdate: func(t *testing.T, s inbox.Store[*redisinbox.Tx], d time.Duration, ids, keys []string) {
					backdate(t, c, s.(*redisinbox.Store), d, ids, keys)
				},
			})
		})
	}
}

var (
	_ inbox.KeyRecorder[*redisinbox.Tx] = (*redisinbox.Store)(nil)
	_ inbox.Finisher[*redisinbox.Tx]    = (*redisinbox.Store)(nil)
)
