package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// memberListerCases pin [outbox.MemberLister]: the fleet as operators see
// it. They are skipped, saying so, when the backend does not implement it
// (or [outbox.Membership], through which the records are written).
func memberListerCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "MemberLister", name: "ListsLiveMembersWithDetails", partitions: 4, run: membersListed[Tx]},
		{group: "MemberLister", name: "ExpiredNotListed", run: membersExpired[Tx]},
		{group: "MemberLister", name: "FailsAfterClose", run: membersClosed[Tx]},
	}
}

func (s *env[Tx]) memberLister(t *testing.T) (outbox.Membership, outbox.MemberLister) {
	t.Helper()
	ml, ok := s.b.(outbox.MemberLister)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.MemberLister", s.b)
	}
	m, ok := s.b.(outbox.Membership)
	if !ok {
		t.Fatalf("the backend (%T) implements outbox.MemberLister but not outbox.Membership, through which members are recorded", s.b)
	}
	return m, ml
}

// members calls Members or fails the case.
func (s *env[Tx]) members(t *testing.T, ml outbox.MemberLister) []outbox.Member {
	t.Helper()
	got, err := ml.Members(s.ctx)
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	return got
}

func fmtListedMember(m outbox.Member) string {
	return fmt.Sprintf("{owner %q, partitions %v, max %d, host %q (%d bytes), version %q (%d bytes), started %s, renewed %s, expires %s}",
		m.Owner, m.Partitions, m.MaxPartitions, outbox.TruncateUTF8(m.Host, 40), len(m.Host), outbox.TruncateUTF8(m.Version, 40), len(m.Version),
		fmtTime(m.Started), fmtTime(m.Renewed), fmtTime(m.Expires))
}

func membersListed[Tx any](t *testing.T, s *env[Tx]) {
	ms, ml := s.memberLister(t)
	if got := s.members(t, ml); len(got) != 0 {
		t.Fatalf("Members of a new outbox: %d members; want none", len(got))
	}
	// Started by the relay's clock, kept to the millisecond (a store may
	// keep no finer time).
	started := time.Now().Add(-90 * time.Minute).Truncate(time.Second).Add(123 * time.Millisecond)
	in := []outbox.Member{
		{Owner: "relay-b", Partitions: []int{1, 3}, MaxPartitions: 2, Host: "host-b.example", Version: "v1.2.3", Started: started},
		{Owner: "relay-a", Partitions: []int{0}, Host: strings.Repeat("h", 300), Version: strings.Repeat("v", 256), Started: started.Add(time.Second)},
		{Owner: "relay-c"},
	}
	wins := map[string]window{}
	const ttl = time.Minute
	for _, m := range in {
		w := window{from: time.Now()}
		back, err := ms.Heartbeat(s.ctx, m, ttl)
		w.to = time.Now()
		if err != nil {
			t.Fatalf("Heartbeat(%s): %v", fmtListedMember(m), err)
		}
		wins[m.Owner] = w
		i := slices.IndexFunc(back, func(b outbox.Member) bool { return b.Owner == m.Owner })
		if i < 0 {
			t.Fatalf("Heartbeat(%q) returned %d members without it", m.Owner, len(back))
		}
		expectBetween(t, fmt.Sprintf("Renewed of %q as Heartbeat returns it", m.Owner), back[i].Renewed, w.from, w.to)
	}
	got := s.members(t, ml)
	var owners []string
	for _, m := range got {
		owners = append(owners, m.Owner)
	}
	if !slices.Equal(owners, []string{"relay-a", "relay-b", "relay-c"}) {
		t.Fatalf("Members listed %q; want [relay-a relay-b relay-c] (every live member, by Owner)", owners)
	}
	for _, m := range in {
		g := got[slices.Index(owners, m.Owner)]
		want := m
		want.Host, want.Version = m.Host[:min(len(m.Host), 255)], m.Version[:min(len(m.Version), 255)]
		d := g.Started.Sub(want.Started)
		if g.Host != want.Host || g.Version != want.Version || !slices.Equal(g.Partitions, want.Partitions) || g.MaxPartitions != want.MaxPartitions ||
			d <= -time.Millisecond || d >= time.Millisecond || g.Started.IsZero() != want.Started.IsZero() {
			t.Errorf("Members listed %s; want %s: the record as Heartbeat stored it, Host and Version cut to 255 bytes, Started to the millisecond", fmtListedMember(g), fmtListedMember(want))
		}
		w := wins[m.Owner]
		expectBetween(t, fmt.Sprintf("Renewed of %q (the store's time of its Heartbeat)", m.Owner), g.Renewed, w.from, w.to)
		expectBetween(t, fmt.Sprintf("Expires of %q (its Heartbeat's time plus the ttl %v)", m.Owner, ttl), g.Expires, w.from.Add(ttl), w.to.Add(ttl))
	}
	// Members is the caller's, and makes no change.
	got[0].Partitions = append(got[0].Partitions[:0], 3)
	if again := s.members(t, ml); !slices.Equal(again[0].Partitions, []int{0}) {
		t.Errorf("Members after the caller changed the Partitions it got lists %v for relay-a; want [0]: the result is the caller's", again[0].Partitions)
	}
}

func membersExpired[Tx any](t *testing.T, s *env[Tx]) {
	ms, ml := s.memberLister(t)
	if _, err := ms.Heartbeat(s.ctx, outbox.Member{Owner: "long", Host: "h"}, longTTL); err != nil {
		t.Fatalf("Heartbeat(long): %v", err)
	}
	if _, err := ms.Heartbeat(s.ctx, outbox.Member{Owner: "short", Host: "h"}, shortTTL); err != nil {
		t.Fatalf("Heartbeat(short): %v", err)
	}
	end := time.Now().Add(shortTTL)
	s.sleepUntil(t, end.Add(clockSkew))
	got := s.members(t, ml)
	if len(got) != 1 || got[0].Owner != "long" {
		var list []string
		for _, m := range got {
			list = append(list, fmtListedMember(m))
		}
		t.Fatalf("Members %v after the record of \"short\" (ttl %v) expired listed %v; want only \"long\"", clockSkew, shortTTL, list)
	}
	if err := ms.Leave(s.ctx, "long"); err != nil {
		t.Fatalf("Leave(long): %v", err)
	}
	if got := s.members(t, ml); len(got) != 0 {
		t.Fatalf("Members after the last member left listed %d members; want none", len(got))
	}
}

func membersClosed[Tx any](t *testing.T, s *env[Tx]) {
	_, ml := s.memberLister(t)
	if err := s.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, err := ml.Members(s.ctx); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Members after Close: got %d members, %v; want an error wrapping ErrClosed", len(got), err)
	}
}
