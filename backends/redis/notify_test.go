package redisoutbox

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

func TestNotice(t *testing.T) {
	t.Parallel()
	all := outbox.AllPartitions
	for _, tc := range []struct {
		name       string
		msg        any
		p          int
		send, gone bool
	}{
		{"PartitionNumber", &redis.Message{Payload: "3"}, 3, true, false},
		{"FirstPartition", &redis.Message{Payload: "0"}, 0, true, false},
		{"OutOfRange", &redis.Message{Payload: "8"}, all, true, false},
		{"Negative", &redis.Message{Payload: "-1"}, all, true, false},
		{"NotANumber", &redis.Message{Payload: "1x"}, all, true, false},
		{"OldBuildsPayloadIsAPartitionOrAll", &redis.Message{Payload: ""}, all, true, false},
		{"ResubscribedAfterReconnect", &redis.Subscription{Kind: "ssubscribe", Count: 1}, all, true, false},
		{"ResubscribedOtherChannelsOfTheConnection", &redis.Subscription{Kind: "ssubscribe", Count: 2}, 0, false, false},
		{"ServerEndedTheSubscription", &redis.Subscription{Kind: "sunsubscribe"}, all, true, true},
		{"Pong", &redis.Pong{}, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, send, gone := notice(tc.msg, 8)
			assert.Equal(t, tc.send, send, "send")
			assert.Equal(t, tc.gone, gone, "gone")
			if tc.send {
				assert.Equal(t, tc.p, p)
			}
		})
	}
}

// killSubscribers kills, on one server, every connection with a sharded
// subscription (CLIENT KILL ID) and returns how many it killed.
func killSubscribers(t *testing.T, ctx context.Context, srv *redis.Client) int {
	t.Helper()
	list, err := srv.ClientList(ctx).Result()
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		var id string
		subscribed := false
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch {
			case k == "id":
				id = v
			case k == "ssub" && v != "0":
				subscribed = true
			}
		}
		if subscribed {
			idn, err := strconv.ParseInt(id, 10, 64)
			require.NoError(t, err)
			require.NoError(t, srv.ClientKillByFilter(ctx, "ID", strconv.FormatInt(idn, 10)).Err())
			n++
		}
	}
	return n
}

// receiveUntil receives from ch until it gets want, failing on a closed
// channel or at the deadline of ctx; it returns how many values came
// before want.
func receiveUntil(t *testing.T, ctx context.Context, ch <-chan int, want int) int {
	t.Helper()
	for n := 0; ; n++ {
		if receive(t, ctx, ch) == want {
			return n
		}
	}
}

// TestNotificationsResubscribeAfterConnectionLoss kills the subscription's
// connection on a private server: go-redis reconnects and resubscribes, the
// channel receives AllPartitions (what was published meanwhile is lost),
// and targeted notifications flow again.
func TestNotificationsResubscribeAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t)
	ctx := testCtx(t)
	b := newBackend(t, srv, Options{Partitions: 5})
	ch, err := b.Notifications(ctx)
	require.NoError(t, err)
	k1 := keyFor(t, 1, 5)
	require.NoError(t, b.Append(ctx, outbox.Entry{Topic: "t", Key: k1}))
	require.Equal(t, 1, receive(t, ctx, ch))

	require.Equal(t, 1, killSubscribers(t, ctx, srv), "one connection subscribes to every partition on a single node")
	require.Equal(t, outbox.AllPartitions, receive(t, ctx, ch), "a resubscribe after a lost connection wakes every partition")
	require.NoError(t, b.Append(ctx, outbox.Entry{Topic: "t", Key: k1}))
	assert.Equal(t, 1, receive(t, ctx, ch), "once per resubscribe, not once per channel")
}

// startPrivateCluster starts a private one-node Redis Cluster holding
// every slot and returns a cluster client on it and a plain client on the
// node.
func startPrivateCluster(t *testing.T) (*redis.ClusterClient, *redis.Client) {
	t.Helper()
	ctx := testCtx(t)
	srv := startPrivateRedis(t, "--cluster-enabled", "yes")
	require.NoError(t, srv.ClusterAddSlotsRange(ctx, 0, 16383).Err())
	for {
		info, err := srv.ClusterInfo(ctx).Result()
		require.NoError(t, err)
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the private cluster did not reach cluster_state:ok: %s", info)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Options().Addr}})
	t.Cleanup(func() { _ = cc.Close() })
	return cc, srv
}

// TestNotificationsClusterResubscribeAndSlotMove runs on a private
// one-node cluster: one subscription per partition; a lost connection is
// healed by go-redis (AllPartitions per partition); when the server ends a
// subscription because its slot left the node, the channel receives
// AllPartitions and closes, so the relay subscribes again.
func TestNotificationsClusterResubscribeAndSlotMove(t *testing.T) {
	t.Parallel()
	cc, srv := startPrivateCluster(t)
	ctx := testCtx(t)
	b := newBackend(t, cc, Options{Partitions: 4})
	ch, err := b.Notifications(ctx)
	require.NoError(t, err)
	k2 := keyFor(t, 2, 4)
	require.NoError(t, b.Append(ctx, outbox.Entry{Topic: "t", Key: k2}))
	require.Equal(t, 2, receive(t, ctx, ch))

	require.Equal(t, 4, killSubscribers(t, ctx, srv), "one subscription per partition on Cluster")
	for range 4 {
		require.Equal(t, outbox.AllPartitions, receive(t, ctx, ch))
	}
	require.NoError(t, b.Append(ctx, outbox.Entry{Topic: "t", Key: k2}))
	require.Equal(t, 2, receive(t, ctx, ch))

	slot, err := srv.ClusterKeySlot(ctx, b.parts[2].notify).Result()
	require.NoError(t, err)
	require.NoError(t, srv.ClusterDelSlots(ctx, int(slot)).Err())
	var got []int
	for p := range ch {
		got = append(got, p)
	}
	assert.Equal(t, []int{outbox.AllPartitions}, got, "the channel closes after AllPartitions")
	require.NoError(t, srv.ClusterAddSlots(ctx, int(slot)).Err()) // for the cleanup
}

// TestNotificationsClusterShards: on the test cluster every partition's
// channel has exactly one shard subscriber, on the master of the
// partition's slot, and none on the other masters.
func TestNotificationsClusterShards(t *testing.T) {
	t.Parallel()
	c := clusterClient(t)
	cc := c.(*redis.ClusterClient)
	ctx := testCtx(t)
	const parts = 12
	b := newBackend(t, c, Options{Partitions: parts})
	_, err := b.Notifications(ctx)
	require.NoError(t, err)
	for p, k := range b.parts {
		slot, err := c.ClusterKeySlot(ctx, k.notify).Result()
		require.NoError(t, err)
		keySlot, err := c.ClusterKeySlot(ctx, k.entries).Result()
		require.NoError(t, err)
		require.Equal(t, keySlot, slot, "partition %d's channel is in its keys' slot", p)
		owner, err := cc.MasterForKey(ctx, k.notify)
		require.NoError(t, err)
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n, err := m.PubSubShardNumSub(ctx, k.notify).Result()
			require.NoError(t, err)
			want := int64(0)
			if m.Options().Addr == owner.Options().Addr {
				want = 1
			}
			assert.Equal(t, want, n[k.notify], "partition %d on %s", p, m.Options().Addr)
			return nil
		}))
	}
}

// TestNotificationsDropWhenFull: the channel buffers 256 values; appends
// never wait for the receiver, and the subscription keeps working after
// values were dropped.
func TestNotificationsDropWhenFull(t *testing.T) {
	t.Parallel()
	c := standaloneClient(t)
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	ch, err := b.Notifications(ctx)
	require.NoError(t, err)
	require.Equal(t, notifyBuffer, cap(ch))
	const appends = notifyBuffer + 44
	for range appends {
		require.NoError(t, b.Append(ctx, outbox.Entry{Topic: "t"}))
	}
	for len(ch) < cap(ch) {
		select {
		case <-ctx.Done():
			t.Fatalf("the buffer holds %d values after %d appends", len(ch), appends)
		case <-time.After(time.Millisecond):
		}
	}
	for range notifyBuffer {
		require.Equal(t, 0, receive(t, ctx, ch))
	}
	// The subscription still works after dropping: a barrier published
	// now (the buffer has room) arrives, after at most the values that
	// were still in flight.
	require.NoError(t, c.SPublish(ctx, b.parts[0].notify, "barrier").Err())
	n := receiveUntil(t, ctx, ch, outbox.AllPartitions)
	assert.LessOrEqual(t, n, appends-notifyBuffer)
}

func TestNotificationsNoNotify(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			ctx := testCtx(t)
			b := newBackend(t, c, Options{NoNotify: true, Partitions: 2})
			sub := c.SSubscribe(ctx, b.parts[0].notify)
			defer sub.Close()
			_, err := sub.Receive(ctx)
			require.NoError(t, err)
			require.NoError(t, b.Append(ctx, outbox.Entry{Topic: "t", Key: keyFor(t, 0, 2)}))
			require.NoError(t, c.SPublish(ctx, b.parts[0].notify, "barrier").Err())
			m, err := sub.ReceiveMessage(ctx)
			require.NoError(t, err)
			assert.Equal(t, "barrier", m.Payload, "with NoNotify an append publishes nothing")

			nctx, cancel := context.WithCancel(ctx)
			ch, err := b.Notifications(nctx)
			require.NoError(t, err)
			cancel()
			for range ch {
				t.Fatal("NoNotify: the channel never fires")
			}
		})
	}
}

func TestNotificationsClose(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			ctx := testCtx(t)
			b := newBackend(t, c, Options{Partitions: 3})
			ch, err := b.Notifications(ctx)
			require.NoError(t, err)
			require.NoError(t, b.Close())
			for range ch {
			}
			_, err = b.Notifications(ctx)
			assert.ErrorIs(t, err, outbox.ErrClosed)
		})
	}
}
