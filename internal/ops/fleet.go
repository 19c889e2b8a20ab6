package ops

import (
	"context"
	"slices"
	"strings"

	"github.com/outboxrelay/outbox"
)

// Fleet is the relays of an outbox joined with its partitions, as the
// fleet views of the front ends show it.
type Fleet struct {
	// Relays are the members of the fleet and every other holder of a
	// live lease, sorted by owner (byte order).
	Relays []Relay
	// Unheld are the partitions no live lease holds while entries of them
	// are pending, in partition order: no relay delivers them.
	Unheld []outbox.PartitionStats
	// Partitions are every partition, in partition order.
	Partitions []outbox.PartitionStats
}

// Relay is one relay of a [Fleet].
type Relay struct {
	// Member is the relay's membership record; for a lease holder without
	// one only Owner is set.
	Member outbox.Member
	// Listed reports whether the relay has a live membership record. A
	// lease holder without one is a relay that does not heartbeat (its
	// store or its version has no membership) or a tool holding a lease.
	Listed bool
	// Held are the partitions whose live lease the relay holds, ascending,
	// by the partitions' leases (not by what the relay last reported in
	// its heartbeat, which is Member.Partitions).
	Held []int
}

// JoinFleet joins members (as [outbox.MemberLister.Members] returns them)
// with parts (as [outbox.PartitionInspector.PartitionStats] returns them).
// Relays and Unheld are new slices; Partitions is parts itself, and the
// slices inside members and parts are shared, not copied.
func JoinFleet(members []outbox.Member, parts []outbox.PartitionStats) Fleet {
	f := Fleet{Partitions: parts}
	byOwner := make(map[string]int, len(members))
	for _, m := range members {
		byOwner[m.Owner] = len(f.Relays)
		f.Relays = append(f.Relays, Relay{Member: m, Listed: true})
	}
	for _, p := range parts {
		owner := p.Lease.Owner
		if owner == "" {
			if p.Pending > 0 {
				f.Unheld = append(f.Unheld, p)
			}
			continue
		}
		i, ok := byOwner[owner]
		if !ok {
			i = len(f.Relays)
			byOwner[owner] = i
			f.Relays = append(f.Relays, Relay{Member: outbox.Member{Owner: owner}})
		}
		f.Relays[i].Held = append(f.Relays[i].Held, p.Partition)
	}
	slices.SortStableFunc(f.Relays, func(a, b Relay) int { return strings.Compare(a.Member.Owner, b.Member.Owner) })
	for _, r := range f.Relays {
		slices.Sort(r.Held)
	}
	return f
}

// LoadFleet reads the members and the partitions of an outbox and joins
// them ([JoinFleet]): two calls on the store, not one consistent read, so
// a lease taken or a relay joining between them may show on one side
// only. Store errors are returned as they are.
func LoadFleet(ctx context.Context, ml outbox.MemberLister, pin outbox.PartitionInspector) (Fleet, error) {
	members, err := ml.Members(ctx)
	if err != nil {
		return Fleet{}, err
	}
	parts, err := pin.PartitionStats(ctx)
	if err != nil {
		return Fleet{}, err
	}
	return JoinFleet(members, parts), nil
}
