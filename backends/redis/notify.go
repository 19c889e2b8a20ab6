package redisoutbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// notifyBuffer is the buffer of each Notifications channel, in values.
const notifyBuffer = 256

// subscribeParallel bounds how many partition subscriptions Notifications
// opens at once on Redis Cluster.
const subscribeParallel = 16

// Notifications subscribes to the partitions' wake-ups: every append that
// adds entries to a partition publishes the partition's number, in the
// same EXEC, on the partition's channel (the partition's keys' base with
// ":notify", for example "{outbox:3}:notify"), and the returned channel
// receives that number. It is sharded pub/sub (SPUBLISH and SSUBSCRIBE,
// Redis 7.0 or later): the channel carries the partition's hash tag, so on
// Redis Cluster a message stays on the partition's shard rather than being
// broadcast to every node.
//
// On a single node (or Sentinel) one connection subscribes to every
// partition's channel. On Redis Cluster a subscription can only name the
// channels of one slot, so Notifications holds one connection per
// partition, each to the master of the partition's slot (opened
// concurrently, up to 16 at a time); with many partitions that is many
// connections per subscriber (see docs/redis.md).
//
// Every subscription is confirmed before Notifications returns, so an
// append committed after that is seen. The channel buffers 256 values;
// when it is full, further values are dropped (the relay's polling finds
// those entries). It receives [outbox.AllPartitions] when a message's
// payload is not a partition number of this outbox, and when go-redis has
// resubscribed after a lost connection (messages published meanwhile are
// lost). When the server ends a subscription itself (on Redis Cluster,
// when a slot moves to another node), the channel receives
// [outbox.AllPartitions] and is closed, so the caller subscribes again on
// the slot's new node (the relay does). Otherwise it is closed when ctx is
// done or the backend is closed. With Options.NoNotify no subscription is
// made and the channel never fires. Safe for concurrent use; each call
// opens its own subscriptions. After Close it returns [outbox.ErrClosed].
func (b *Backend) Notifications(ctx context.Context) (<-chan int, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	ch := make(chan int, notifyBuffer)
	if b.opts.NoNotify {
		go func() {
			defer close(ch)
			select {
			case <-ctx.Done():
			case <-b.done:
			}
		}()
		return ch, nil
	}
	subs, err := b.subscribe(ctx, b.notifyGroups())
	if err != nil {
		return nil, err
	}
	lost := make(chan struct{})
	var lostOnce sync.Once
	var wg sync.WaitGroup
	for _, sub := range subs {
		msgs := sub.ChannelWithSubscriptions(redis.WithChannelSize(notifyBuffer))
		wg.Go(func() {
			// Drain until go-redis closes msgs (after sub.Close), so its
			// reader never waits on a full channel.
			for m := range msgs {
				p, send, gone := notice(m, len(b.parts))
				if send {
					select {
					case ch <- p:
					default:
					}
				}
				if gone {
					lostOnce.Do(func() { close(lost) })
				}
			}
		})
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-b.done:
		case <-lost:
		}
		for _, sub := range subs {
			_ = sub.Close()
		}
		wg.Wait()
		close(ch)
	}()
	return ch, nil
}

// notifyGroups lists the channels to subscribe to, one group per
// subscription: every partition in one on a single node, one per
// partition on Redis Cluster (SSUBSCRIBE takes the channels of one slot,
// and go-redis resubscribes all of a subscription's channels in one
// command after a reconnect).
func (b *Backend) notifyGroups() [][]string {
	if b.cluster {
		groups := make([][]string, len(b.parts))
		for p := range b.parts {
			groups[p] = []string{b.parts[p].notify}
		}
		return groups
	}
	all := make([]string, len(b.parts))
	for p := range b.parts {
		all[p] = b.parts[p].notify
	}
	return [][]string{all}
}

// subscribe opens one sharded subscription per group and waits for every
// channel's confirmation. On error it closes what it opened.
func (b *Backend) subscribe(ctx context.Context, groups [][]string) ([]*redis.PubSub, error) {
	subs := make([]*redis.PubSub, len(groups))
	errs := make([]error, len(groups))
	sem := make(chan struct{}, subscribeParallel)
	var wg sync.WaitGroup
	for i, chans := range groups {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			subs[i] = b.client.SSubscribe(ctx, chans...)
			for range chans {
				m, err := subs[i].Receive(ctx)
				if err == nil {
					if s, ok := m.(*redis.Subscription); !ok || s.Kind != "ssubscribe" {
						err = fmt.Errorf("unexpected reply %v to SSUBSCRIBE", m)
					}
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range subs {
			_ = s.Close()
		}
		return nil, b.mapErr(ctx, "Notifications", err)
	}
	return subs, nil
}

// notice interprets one message of a subscription: the partition to send
// (send false: nothing) and whether the subscription is gone for good.
//
//   - a message whose payload is a partition number of the outbox: that
//     partition; any other payload: AllPartitions;
//   - a subscribe confirmation (after the first ones, which subscribe
//     consumed): go-redis reconnected and resubscribed, and whatever was
//     published meanwhile is lost: AllPartitions, once per resubscribe
//     (a new connection confirms each channel, counting up from 1);
//   - an unsubscribe the backend did not ask for (the server ends a
//     sharded subscription when its slot moves): AllPartitions, and the
//     subscription is gone.
func notice(m any, partitions int) (p int, send, gone bool) {
	switch m := m.(type) {
	case *redis.Message:
		p, err := strconv.Atoi(m.Payload)
		if err != nil || p < 0 || p >= partitions {
			return outbox.AllPartitions, true, false
		}
		return p, true, false
	case *redis.Subscription:
		switch m.Kind {
		case "ssubscribe", "subscribe":
			return outbox.AllPartitions, m.Count <= 1, false
		case "sunsubscribe", "unsubscribe":
			return outbox.AllPartitions, true, true
		}
	}
	return 0, false, false
}
