package conformance_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// memberListerVariants break Members, and what Heartbeat stores for it.
var memberListerVariants = []variant{
	{"members-drop-details", "Members lists each member without its Host, Version and Started", []string{"MemberLister/ListsLiveMembersWithDetails"}},
	{"heartbeat-drops-details", "Heartbeat stores the member without its Host, Version and Started", []string{"MemberLister/ListsLiveMembersWithDetails"}},
	{"members-renewed-missing", "Members lists each member with a zero Renewed", []string{"MemberLister/ListsLiveMembersWithDetails"}},
	{"members-started-seconds", "Members reports Started cut to the second", []string{"MemberLister/ListsLiveMembersWithDetails"}},
	{"member-host-not-cut", "Members reports Host and Version as given, longer than 255 bytes", []string{"MemberLister/ListsLiveMembersWithDetails"}},
	{"members-include-expired", "Members lists every member that ever heartbeated, expired or not", []string{"MemberLister/ExpiredNotListed"}},
	{"members-closed-ok", "Members after Close returns no members and nil", []string{"MemberLister/FailsAfterClose"}},
}

// breakHeartbeat records the member given to Heartbeat and returns what
// Heartbeat stores.
func (w *broken) breakHeartbeat(m outbox.Member) outbox.Member {
	w.op.mu.Lock()
	in := m
	in.Partitions = slices.Clone(m.Partitions)
	w.op.members[m.Owner] = in
	w.op.mu.Unlock()
	if w.variant == "heartbeat-drops-details" {
		m.Host, m.Version, m.Started = "", "", time.Time{}
	}
	return m
}

func (w *broken) Members(ctx context.Context) ([]outbox.Member, error) {
	got, err := w.Backend.Members(w.ctx(ctx))
	if err != nil {
		if w.variant == "members-closed-ok" && errors.Is(err, outbox.ErrClosed) {
			return nil, nil
		}
		return got, err
	}
	w.op.mu.Lock()
	defer w.op.mu.Unlock()
	if w.variant == "members-include-expired" {
		for owner, m := range w.op.members {
			if !slices.ContainsFunc(got, func(g outbox.Member) bool { return g.Owner == owner }) {
				m.Expires = time.Now().Add(-time.Second)
				got = append(got, m)
			}
		}
		slices.SortFunc(got, func(x, y outbox.Member) int { return strings.Compare(x.Owner, y.Owner) })
	}
	for i := range got {
		switch w.variant {
		case "members-drop-details":
			got[i].Host, got[i].Version, got[i].Started = "", "", time.Time{}
		case "members-renewed-missing":
			got[i].Renewed = time.Time{}
		case "members-started-seconds":
			got[i].Started = got[i].Started.Truncate(time.Second)
		case "member-host-not-cut":
			in := w.op.members[got[i].Owner]
			got[i].Host, got[i].Version = in.Host, in.Version
		}
	}
	return got, nil
}
