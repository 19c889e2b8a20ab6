package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// The operator interfaces: [outbox.Lister], [outbox.Pauser] and
// [outbox.MemberLister]. See "# Operators" in doc.go.

// stateOf returns the state of a stored entry at now, as
// [outbox.Lister.Entries] selects it.
func stateOf(it *item, now time.Time) outbox.EntryState {
	switch {
	case it.state == stateParked:
		return outbox.StateParked
	case !it.due.After(now):
		return outbox.StateDue
	case it.e.Attempts == 0:
		return outbox.StateScheduled
	default:
		return outbox.StateRetrying
	}
}

// matches reports whether the entry of it matches every field of f that
// is set.
func matches(f outbox.ListFilter, it *item) bool {
	e := &it.e
	switch {
	case f.Topic != "" && e.Topic != f.Topic,
		f.Key != "" && e.Key != f.Key,
		!f.Since.IsZero() && e.CreatedAt.Before(f.Since),
		!f.Until.IsZero() && !e.CreatedAt.Before(f.Until):
		return false
	}
	return f.Error == "" || strings.Contains(foldASCII(e.LastError), foldASCII(f.Error))
}

// foldASCII lowers the ASCII letters of s and leaves every other byte as
// it is, as [outbox.ListFilter.Error] compares.
func foldASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// checkLimit rejects a listing limit that is not positive.
func checkLimit(method string, limit int) error {
	if limit <= 0 {
		return fmt.Errorf("memory: %s: limit is %d; it must be positive: %w", method, limit, outbox.ErrInvalidArgument)
	}
	return nil
}

// Entries lists the entries in state that match filter, by the byte order
// of their IDs, starting after the ID after, at most limit of them, each
// as [Backend.Lookup] reports it. A state that is not one of
// [outbox.EntryStates], or a limit that is not positive, gives an error
// wrapping [outbox.ErrInvalidArgument]. A page is read under the
// backend's lock, so it is consistent; it costs O(n log n) in the stored
// entries. See [outbox.Lister].
func (b *Backend) Entries(ctx context.Context, state outbox.EntryState, filter outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if !slices.Contains(outbox.EntryStates, state) {
		return nil, fmt.Errorf("memory: Entries: unknown state %q; use one of %q: %w", state, outbox.EntryStates, outbox.ErrInvalidArgument)
	}
	if err := checkLimit("Entries", limit); err != nil {
		return nil, err
	}
	now := b.clock()
	var found []*item
	for id, it := range b.entries {
		if id > after && stateOf(it, now) == state && matches(filter, it) {
			found = append(found, it)
		}
	}
	slices.SortFunc(found, func(x, y *item) int { return strings.Compare(x.e.ID, y.e.ID) })
	found = found[:min(limit, len(found))]
	out := make([]outbox.EntryInfo, len(found))
	for i, it := range found {
		out[i] = it.info()
	}
	return out, nil
}

// keyHead is the head of one key of a partition: its earliest-appended
// pending entry, and how many pending entries of the key follow it.
type keyHead struct {
	head    *item
	waiting int64
}

// heads returns the head of every non-empty key with a pending entry in p.
func (p *partition) heads() map[string]*keyHead {
	out := make(map[string]*keyHead)
	p.eachPending(func(it *item) {
		if it.e.Key == "" {
			return
		}
		h := out[it.e.Key]
		switch {
		case h == nil:
			out[it.e.Key] = &keyHead{head: it}
		case it.seq < h.head.seq:
			h.head = it
			h.waiting++
		default:
			h.waiting++
		}
	})
	return out
}

// blocksKey reports whether the pending entry it, the head of its key,
// holds back the later entries of its key: it was attempted or deferred
// (it is failing), or its topic is paused.
func (p *partition) blocksKey(it *item) bool {
	_, failing := p.failing[it.e.Key][it]
	_, paused := p.topics[it.e.Topic]
	return failing || paused
}

// blockedSince is when the key of head became blocked: the oldest attempt
// of its history, else its append time.
func blockedSince(head *item) time.Time {
	if len(head.history) > 0 {
		return head.history[0].At
	}
	return head.e.CreatedAt
}

// compareBlocked orders blocked keys by Since, then by the byte order of
// their head's ID.
func compareBlocked(x, y outbox.BlockedKey) int {
	if c := x.Since.Compare(y.Since); c != 0 {
		return c
	}
	return strings.Compare(x.Head.ID, y.Head.ID)
}

// BlockedKeys lists the keys held back by their head entry (attempted,
// deferred or of a paused topic) whose head matches filter, the longest
// blocked first (by Since, then the head's ID in byte order), starting
// after the key after, at most limit of them. A limit that is not
// positive gives an error wrapping [outbox.ErrInvalidArgument]. A page is
// read under the backend's lock; it costs O(n log n) in the pending
// entries. See [outbox.Lister].
func (b *Backend) BlockedKeys(ctx context.Context, filter outbox.ListFilter, after outbox.BlockedKey, limit int) ([]outbox.BlockedKey, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if err := checkLimit("BlockedKeys", limit); err != nil {
		return nil, err
	}
	var out []outbox.BlockedKey
	for _, p := range b.parts {
		for _, h := range p.heads() {
			if !p.blocksKey(h.head) || !matches(filter, h.head) {
				continue
			}
			k := outbox.BlockedKey{Waiting: h.waiting, Since: blockedSince(h.head)}
			k.Head.ID = h.head.e.ID
			if compareBlocked(k, after) <= 0 {
				continue
			}
			k.Head = h.head.info()
			out = append(out, k)
		}
	}
	slices.SortFunc(out, compareBlocked)
	return slices.Clip(out[:min(limit, len(out))]), nil
}

// PauseTopic pauses topic for every relay of this Backend: fetches skip
// its entries, and each of its pending entries holds back the later
// entries of its key, until [Backend.ResumeTopic]. Pausing a paused topic
// keeps its Since. An empty topic gives an error wrapping
// [outbox.ErrInvalidArgument]. It costs O(n) in the pending entries. See
// [outbox.Pauser].
func (b *Backend) PauseTopic(ctx context.Context, topic string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if topic == "" {
		return fmt.Errorf("memory: PauseTopic: the topic is empty; name the topic to pause: %w", outbox.ErrInvalidArgument)
	}
	if _, ok := b.topics[topic]; ok {
		return nil
	}
	b.topics[topic] = b.clock()
	for _, p := range b.parts {
		p.eachPending(func(it *item) {
			if it.e.Topic == topic && it.e.Key != "" {
				addTo(p.pausedKeys, it)
			}
		})
	}
	return nil
}

// ResumeTopic resumes topic: its entries, and those they held back, are
// fetched again from the next fetch on, in their order. Resuming a topic
// that is not paused is a no-op. An empty topic gives an error wrapping
// [outbox.ErrInvalidArgument]. See [outbox.Pauser].
func (b *Backend) ResumeTopic(ctx context.Context, topic string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if topic == "" {
		return fmt.Errorf("memory: ResumeTopic: the topic is empty; name the topic to resume: %w", outbox.ErrInvalidArgument)
	}
	if _, ok := b.topics[topic]; !ok {
		return nil
	}
	delete(b.topics, topic)
	for _, p := range b.parts {
		for _, set := range p.pausedKeys {
			for it := range set {
				if it.e.Topic == topic {
					removeFrom(p.pausedKeys, it)
				}
			}
		}
		for key := range p.held {
			p.release(key)
		}
	}
	return nil
}

// PausePartition pauses partition: a fetch of it (with its live lease)
// returns nothing until [Backend.ResumePartition]. Pausing a paused
// partition keeps its Since. A partition out of range gives an error
// wrapping [outbox.ErrInvalidArgument]. See [outbox.Pauser].
func (b *Backend) PausePartition(ctx context.Context, partition int) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	p, err := b.partition(partition)
	if err != nil {
		return fmt.Errorf("memory: PausePartition: %w", err)
	}
	if p.paused.IsZero() {
		p.paused = b.clock()
	}
	return nil
}

// ResumePartition resumes partition; resuming a partition that is not
// paused is a no-op. A partition out of range gives an error wrapping
// [outbox.ErrInvalidArgument]. See [outbox.Pauser].
func (b *Backend) ResumePartition(ctx context.Context, partition int) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	p, err := b.partition(partition)
	if err != nil {
		return fmt.Errorf("memory: ResumePartition: %w", err)
	}
	p.paused = time.Time{}
	return nil
}

// Paused reports the paused topics, by byte order, and the paused
// partitions, ascending, each with the backend's time it was paused. See
// [outbox.Pauser].
func (b *Backend) Paused(ctx context.Context) (outbox.Paused, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.Paused{}, err
	}
	defer b.mu.Unlock()
	var out outbox.Paused
	for topic, since := range b.topics {
		out.Topics = append(out.Topics, outbox.PausedTopic{Topic: topic, Since: since})
	}
	slices.SortFunc(out.Topics, func(x, y outbox.PausedTopic) int { return strings.Compare(x.Topic, y.Topic) })
	for i, p := range b.parts {
		if !p.paused.IsZero() {
			out.Partitions = append(out.Partitions, outbox.PausedPartition{Partition: i, Since: p.paused})
		}
	}
	return out, nil
}

// Members returns the relays whose record has not expired by the
// backend's clock, sorted by Owner, as [Backend.Heartbeat] stored them,
// with Expires and Renewed set. It drops no record. See
// [outbox.MemberLister].
func (b *Backend) Members(ctx context.Context) ([]outbox.Member, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	now := b.clock()
	out := make([]outbox.Member, 0, len(b.members))
	for _, rec := range b.members {
		if now.Before(rec.Expires) {
			rec.Partitions = slices.Clone(rec.Partitions)
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(x, y outbox.Member) int { return cmp.Compare(x.Owner, y.Owner) })
	return out, nil
}
