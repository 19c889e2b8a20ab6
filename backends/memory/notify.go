package memory

import "context"

// subscriber is one Notifications channel.
type subscriber struct {
	ch chan int
}

// notifyBuffer is the buffer of each Notifications channel.
const notifyBuffer = 256

// Notifications returns a channel that receives, without blocking, the
// partitions of each commit that added at least one new entry: one value
// per partition appended to. Its buffer holds 256 values; when it is full,
// further values are dropped (the relay's polling finds those entries).
// It is closed when ctx is done or the backend is closed. Any number of
// subscribers may exist at once.
func (b *Backend) Notifications(ctx context.Context) (<-chan int, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	s := &subscriber{ch: make(chan int, notifyBuffer)}
	b.subs[s] = struct{}{}
	go func() {
		select {
		case <-ctx.Done():
		case <-b.done:
			return // Close closed the channel.
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[s]; ok {
			delete(b.subs, s)
			close(s.ch)
		}
	}()
	return s.ch, nil
}

// notify sends partitions to every subscriber without blocking. b.mu must
// be held.
func (b *Backend) notify(partitions []int) {
	for s := range b.subs {
		for _, p := range partitions {
			select {
			case s.ch <- p:
			default:
			}
		}
	}
}
