package conformance_test

import (
	"context"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
)

// membershipVariants break Heartbeat and Leave.
var membershipVariants = []variant{
	{"member-expires-from-input", "Heartbeat returns the caller's record with the Expires it was given instead of the store's expiry", []string{"Membership/HeartbeatReturnsCallerWithStoreExpiry"}},
	{"members-unsorted", "Heartbeat returns the members in reverse order of Owner", []string{"Membership/MembersSeeEachOtherSortedByOwner"}},
	{"heartbeat-merges-partitions", "Heartbeat adds the member's partitions to those of its earlier record instead of replacing the record", []string{"Membership/HeartbeatReplacesTheRecord"}},
	{"members-never-expire", "Heartbeat ignores the ttl and keeps every record for a day", []string{"Membership/RecordExpiresAfterTTL"}},
	{"leave-does-nothing", "Leave returns nil without deleting the record", []string{"Membership/LeaveRemovesAtOnceAndIsIdempotent"}},
	{"heartbeat-arguments-unchecked", "Heartbeat repairs bad arguments (an empty owner, ttl <= 0, partitions out of range, a negative MaxPartitions) instead of refusing them", []string{"Membership/HeartbeatRejectsBadArguments"}},
	{"heartbeat-retains-partitions", "Heartbeat keeps the caller's Partitions slice and returns it in later results", []string{"Membership/DoesNotShareSlicesWithCaller"}},
	{"member-ttl-doubled", "Heartbeat keeps the record for twice the ttl", []string{"Membership/RecordGoneNotMuchAfterTTL", "Membership/HeartbeatReturnsCallerWithStoreExpiry"}},
}

func (w *broken) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	m = w.breakHeartbeat(m)
	in := m
	switch w.variant {
	case "members-never-expire":
		ttl = 24 * time.Hour
	case "member-ttl-doubled":
		if ttl > 0 {
			ttl *= 2
		}
	case "heartbeat-arguments-unchecked":
		if m.Owner == "" {
			m.Owner = "anonymous"
		}
		if ttl <= 0 {
			ttl = time.Minute
		}
		m.MaxPartitions = max(m.MaxPartitions, 0)
		m.Partitions = slices.DeleteFunc(slices.Clone(m.Partitions), func(p int) bool { return p < 0 || p >= w.Partitions() })
	case "heartbeat-merges-partitions":
		w.mu.Lock()
		merged := slices.Sorted(slices.Values(append(slices.Clone(w.given[m.Owner]), m.Partitions...)))
		merged = slices.Compact(merged)
		w.given[m.Owner] = merged
		w.mu.Unlock()
		m.Partitions = merged
	}
	got, err := w.Backend.Heartbeat(w.ctx(ctx), m, ttl)
	if err != nil {
		return got, err
	}
	switch w.variant {
	case "member-expires-from-input":
		for i := range got {
			if got[i].Owner == in.Owner {
				got[i].Expires = in.Expires
			}
		}
	case "members-unsorted":
		slices.Reverse(got)
	case "heartbeat-retains-partitions":
		w.mu.Lock()
		w.given[in.Owner] = in.Partitions
		for i := range got {
			if p, ok := w.given[got[i].Owner]; ok {
				got[i].Partitions = p
			}
		}
		w.mu.Unlock()
	}
	return got, nil
}

func (w *broken) Leave(ctx context.Context, owner string) error {
	if w.variant == "leave-does-nothing" {
		return nil
	}
	return w.Backend.Leave(w.ctx(ctx), owner)
}
