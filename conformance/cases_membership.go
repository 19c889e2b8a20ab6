package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// membershipCases pin [outbox.Membership]: the records through which the
// relays of one outbox find each other. They are skipped, saying so, when
// the backend does not implement it.
func membershipCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Membership", name: "HeartbeatReturnsCallerWithStoreExpiry", partitions: 4, run: memberHeartbeat[Tx]},
		{group: "Membership", name: "MembersSeeEachOtherSortedByOwner", partitions: 4, run: memberSorted[Tx]},
		{group: "Membership", name: "HeartbeatReplacesTheRecord", partitions: 4, run: memberReplace[Tx]},
		{group: "Membership", name: "RecordExpiresAfterTTL", run: memberExpires[Tx]},
		{group: "Membership", name: "LeaveRemovesAtOnceAndIsIdempotent", run: memberLeave[Tx]},
		{group: "Membership", name: "HeartbeatRejectsBadArguments", partitions: 4, run: memberArgs[Tx]},
		{group: "Membership", name: "FailsAfterClose", run: memberClosed[Tx]},
		{group: "Membership", name: "DoesNotShareSlicesWithCaller", partitions: 4, run: memberNoAlias[Tx]},
	}
}

func (s *env[Tx]) membership(t *testing.T) outbox.Membership {
	t.Helper()
	m, ok := s.b.(outbox.Membership)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Membership", s.b)
	}
	return m
}

// heartbeat calls Heartbeat or fails the case. It checks what holds for
// every result: m is listed, owners are unique and ascending, and every
// Expires lies ahead of the moment the call was made (a record that has
// expired is not returned). It returns the members and when the call
// started and returned, by the suite's clock.
func (s *env[Tx]) heartbeat(t *testing.T, ms outbox.Membership, m outbox.Member, ttl time.Duration) (members []outbox.Member, start, end time.Time) {
	t.Helper()
	start = time.Now()
	got, err := ms.Heartbeat(s.ctx, m, ttl)
	end = time.Now()
	if err != nil {
		t.Fatalf("Heartbeat(%s, ttl %v): %v", fmtMember(m), ttl, err)
	}
	if !slices.IsSortedFunc(got, func(a, b outbox.Member) int { return strings.Compare(a.Owner, b.Owner) }) {
		t.Fatalf("Heartbeat(%s) returned %s: members must be sorted by Owner", fmtMember(m), fmtMembers(got, end))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Owner == got[i-1].Owner {
			t.Fatalf("Heartbeat(%s) returned %s: owner %q is listed twice (one record per owner)", fmtMember(m), fmtMembers(got, end), got[i].Owner)
		}
	}
	if findMember(got, m.Owner) < 0 {
		t.Fatalf("Heartbeat(%s) returned %s, without the caller", fmtMember(m), fmtMembers(got, end))
	}
	for _, g := range got {
		// The record was live when the call ran, by the store's clock.
		if g.Expires.Before(start.Add(-clockSkew)) {
			t.Fatalf("Heartbeat(%s) returned %s: %q has Expires %v, before the call started at %v; Heartbeat returns only live records, with Expires set by the store's clock (ttl after now for the caller's; the Expires passed in is ignored)",
				fmtMember(m), fmtMembers(got, end), g.Owner, g.Expires.Format(time.StampMilli), start.Format(time.StampMilli))
		}
	}
	return got, start, end
}

// findMember returns the index of owner's record in ms, or -1.
func findMember(ms []outbox.Member, owner string) int {
	return slices.IndexFunc(ms, func(m outbox.Member) bool { return m.Owner == owner })
}

func fmtMember(m outbox.Member) string {
	return fmt.Sprintf("member{owner %q, partitions %v, max %d}", m.Owner, m.Partitions, m.MaxPartitions)
}

// fmtMembers formats members with their expiry relative to now.
func fmtMembers(ms []outbox.Member, now time.Time) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("{%q partitions %v max %d expires in %v}", m.Owner, m.Partitions, m.MaxPartitions, m.Expires.Sub(now).Round(time.Millisecond))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// expectMember fails the case unless ms holds owner's record with the
// given partitions (in order; nil and empty are the same) and
// MaxPartitions.
func expectMember(t *testing.T, what string, ms []outbox.Member, owner string, partitions []int, maxPartitions int) outbox.Member {
	t.Helper()
	i := findMember(ms, owner)
	if i < 0 {
		t.Fatalf("%s: %q is not listed in %s", what, owner, fmtMembers(ms, time.Now()))
	}
	m := ms[i]
	if !slices.Equal(m.Partitions, partitions) || m.MaxPartitions != maxPartitions {
		t.Fatalf("%s: %q is listed with partitions %v and MaxPartitions %d, want %v and %d", what, owner, m.Partitions, m.MaxPartitions, partitions, maxPartitions)
	}
	return m
}

// expectOwners fails the case unless ms lists exactly owners, in order.
func expectOwners(t *testing.T, what string, ms []outbox.Member, owners ...string) {
	t.Helper()
	got := make([]string, len(ms))
	for i, m := range ms {
		got[i] = m.Owner
	}
	if !slices.Equal(got, owners) {
		t.Fatalf("%s: got members %s, want owners %q", what, fmtMembers(ms, time.Now()), owners)
	}
}

// expectExpiry fails the case unless a record written by a Heartbeat with
// ttl that ran between start and end expires ttl after the store's clock
// during the call, allowing clockSkew.
func expectExpiry(t *testing.T, what string, m outbox.Member, ttl time.Duration, start, end time.Time) {
	t.Helper()
	lo, hi := start.Add(ttl-clockSkew), end.Add(ttl+clockSkew)
	if m.Expires.Before(lo) || m.Expires.After(hi) {
		t.Fatalf("%s: %q expires at %v, want ttl %v after the store's clock during the call (between %v and %v, allowing %v of clock skew)",
			what, m.Owner, m.Expires.Format(time.StampMilli), ttl, lo.Format(time.StampMilli), hi.Format(time.StampMilli), clockSkew)
	}
}

func memberHeartbeat[Tx any](t *testing.T, s *env[Tx]) {
	ms := s.membership(t)
	a := outbox.Member{Owner: s.owner("relay"), Partitions: []int{0, 2}, MaxPartitions: 3, Expires: time.Now().Add(-time.Hour)}
	got, start, end := s.heartbeat(t, ms, a, longTTL)
	expectOwners(t, "first Heartbeat on an empty outbox", got, a.Owner)
	m := expectMember(t, "first Heartbeat", got, a.Owner, []int{0, 2}, 3)
	expectExpiry(t, fmt.Sprintf("Heartbeat with ttl %v and Member.Expires an hour ago (which is ignored)", longTTL), m, longTTL, start, end)

	// A relay that holds nothing and has no cap.
	idle := outbox.Member{Owner: s.owner("idle")}
	got, start, end = s.heartbeat(t, ms, idle, shortTTL)
	if len(got) != 2 {
		t.Fatalf("Heartbeat of a second owner: got %s, want both owners", fmtMembers(got, end))
	}
	m = expectMember(t, "Heartbeat of a member with no partitions and no cap", got, idle.Owner, nil, 0)
	expectExpiry(t, fmt.Sprintf("Heartbeat with ttl %v", shortTTL), m, shortTTL, start, end)
}

func memberSorted[Tx any](t *testing.T, s *env[Tx]) {
	ms := s.membership(t)
	// Heartbeats in an order that is not the owners' order.
	z := outbox.Member{Owner: s.owner("zulu"), Partitions: []int{3}}
	a := outbox.Member{Owner: s.owner("alpha"), Partitions: []int{0, 1}, MaxPartitions: 2}
	m := outbox.Member{Owner: s.owner("mike"), Partitions: []int{2}, MaxPartitions: 1}
	got, _, _ := s.heartbeat(t, ms, z, longTTL)
	expectOwners(t, "Heartbeat of "+z.Owner, got, z.Owner)
	got, _, _ = s.heartbeat(t, ms, a, longTTL)
	expectOwners(t, "Heartbeat of "+a.Owner+" after "+z.Owner, got, a.Owner, z.Owner)
	got, _, _ = s.heartbeat(t, ms, m, longTTL)
	expectOwners(t, "Heartbeat of "+m.Owner+" after "+z.Owner+" and "+a.Owner, got, a.Owner, m.Owner, z.Owner)
	// The first owner sees the others on its next heartbeat.
	got, _, _ = s.heartbeat(t, ms, z, longTTL)
	expectOwners(t, "second Heartbeat of "+z.Owner, got, a.Owner, m.Owner, z.Owner)
	for _, want := range []outbox.Member{z, a, m} {
		expectMember(t, "second Heartbeat of "+z.Owner, got, want.Owner, want.Partitions, want.MaxPartitions)
	}
}

func memberReplace[Tx any](t *testing.T, s *env[Tx]) {
	ms := s.membership(t)
	owner := s.owner("relay")
	s.heartbeat(t, ms, outbox.Member{Owner: owner, Partitions: []int{0, 1}, MaxPartitions: 2}, time.Hour)
	got, start, end := s.heartbeat(t, ms, outbox.Member{Owner: owner, Partitions: []int{3}}, longTTL)
	what := fmt.Sprintf("second Heartbeat of %q (partitions [3], no cap, ttl %v) after one with partitions [0 1], cap 2, ttl 1h", owner, longTTL)
	expectOwners(t, what, got, owner)
	m := expectMember(t, what+" (the record is replaced)", got, owner, []int{3}, 0)
	expectExpiry(t, what+" (the new ttl replaces the old one, even when shorter)", m, longTTL, start, end)
	other := s.owner("other")
	got, _, _ = s.heartbeat(t, ms, outbox.Member{Owner: other}, longTTL)
	expectMember(t, "Heartbeat of another owner after the replacement", got, owner, []int{3}, 0)
}

func memberExpires[Tx any](t *testing.T, s *env[Tx]) {
	ms := s.membership(t)
	short, long := s.owner("short"), s.owner("long")
	_, registered, _ := s.heartbeat(t, ms, outbox.Member{Owner: short, Partitions: []int{0}}, shortTTL)
	// short's record expires shortTTL after the store's clock during its
	// Heartbeat, which started at registered.
	deadline := time.Now().Add(waitLimit)
	for {
		got, _, end := s.heartbeat(t, ms, outbox.Member{Owner: long}, longTTL)
		if findMember(got, short) < 0 {
			if surelyBefore(end, registered.Add(shortTTL)) {
				t.Fatalf("Heartbeat of %q returned at %v without %q, whose record (ttl %v) was written at %v or later: it expired early",
					long, end.Format(time.StampMilli), short, shortTTL, registered.Format(time.StampMilli))
			}
			expectOwners(t, fmt.Sprintf("Heartbeat of %q after %q's record expired", long, short), got, long)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q, heartbeat with ttl %v and not renewed, is still listed %v later: %s", short, shortTTL, time.Since(registered).Round(time.Millisecond), fmtMembers(got, end))
		}
		s.sleep(t, pollEvery)
	}
}

func memberLeave[Tx any](t *testing.T, s *env[Tx]) {
	ms := s.membership(t)
	a, b := s.owner("a"), s.owner("b")
	s.heartbeat(t, ms, outbox.Member{Owner: a, Partitions: []int{0}}, longTTL)
	got, _, _ := s.heartbeat(t, ms, outbox.Member{Owner: b}, longTTL)
	expectOwners(t, "Heartbeats of two owners", got, a, b)
	if err := ms.Leave(s.ctx, a); err != nil {
		t.Fatalf("Leave(%q): %v", a, err)
	}
	got, _, _ = s.heartbeat(t, ms, outbox.Member{Owner: b}, longTTL)
	expectOwners(t, fmt.Sprintf("Heartbeat of %q right after Leave(%q) (its record goes at once, not when it expires)", b, a), got, b)
	if err := ms.Leave(s.ctx, a); err != nil {
		t.Fatalf("second Leave(%q): got %v, want nil (leaving twice is a no-op)", a, err)
	}
	if err := ms.Leave(s.ctx, s.owner("never-seen")); err != nil {
		t.Fatalf("Leave of an owner without a record: got %v, want nil", err)
	}
	got, _, _ = s.heartbeat(t, ms, outbox.Member{Owner: a, Partitions: []int{0}}, longTTL)
	expectOwners(t, fmt.Sprintf("Heartbeat of %q after it left (it joins again)", a), got, a, b)
}

func memberArgs[Tx any](t *testing.T, s *env[Tx]) {
	ms := s.membership(t)
	for i, c := range []struct {
		what string
		m    outbox.Member
		ttl  time.Duration
	}{
		{"an empty owner", outbox.Member{Partitions: []int{0}}, longTTL},
		{"a zero ttl", outbox.Member{}, 0},
		{"a negative ttl", outbox.Member{}, -time.Second},
		{"partition -1", outbox.Member{Partitions: []int{0, -1}}, longTTL},
		{fmt.Sprintf("partition %d of %d", s.parts, s.parts), outbox.Member{Partitions: []int{1, s.parts}}, longTTL},
		{"MaxPartitions -1", outbox.Member{MaxPartitions: -1}, longTTL},
	} {
		m := c.m
		if c.what != "an empty owner" {
			m.Owner = fmt.Sprintf("refused-%d", i)
		}
		got, err := ms.Heartbeat(s.ctx, m, c.ttl)
		if !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Heartbeat(%s, ttl %v) with %s: got %s, %v; want an error wrapping ErrInvalidArgument", fmtMember(m), c.ttl, c.what, fmtMembers(got, time.Now()), err)
		}
	}
	// None of the refused calls left a record.
	owner := s.owner("valid")
	got, _, _ := s.heartbeat(t, ms, outbox.Member{Owner: owner, Partitions: []int{0, s.parts - 1}, MaxPartitions: s.parts}, longTTL)
	expectOwners(t, "Heartbeat after the refused ones (they must not have recorded anything)", got, owner)
}

func memberClosed[Tx any](t *testing.T, s *env[Tx]) {
	ms := s.membership(t)
	owner := s.owner("relay")
	s.heartbeat(t, ms, outbox.Member{Owner: owner}, longTTL)
	if err := s.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, err := ms.Heartbeat(s.ctx, outbox.Member{Owner: owner}, longTTL); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Heartbeat after Close: got %s, %v; want an error wrapping ErrClosed", fmtMembers(got, time.Now()), err)
	}
	if err := ms.Leave(s.ctx, owner); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Leave of a member after Close: got %v, want an error wrapping ErrClosed", err)
	}
	if err := ms.Leave(s.ctx, "never-seen"); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Leave of an owner without a record after Close: got %v, want an error wrapping ErrClosed (a closed backend refuses every call, even a no-op)", err)
	}
}

// memberCancelled checks Heartbeat and Leave with a cancelled context (a
// part of Lifecycle/CancelledContextChangesNothing).
func (s *env[Tx]) memberCancelled(t *testing.T, ctx context.Context) {
	t.Helper()
	ms, ok := s.b.(outbox.Membership)
	if !ok {
		return
	}
	stays := s.owner("stays")
	s.heartbeat(t, ms, outbox.Member{Owner: stays}, longTTL)
	gone := s.owner("cancelled")
	if _, err := ms.Heartbeat(ctx, outbox.Member{Owner: gone}, longTTL); !errors.Is(err, context.Canceled) {
		t.Errorf("Heartbeat with a cancelled context: got %v, want an error wrapping context.Canceled", err)
	}
	if err := ms.Leave(ctx, stays); !errors.Is(err, context.Canceled) {
		t.Errorf("Leave with a cancelled context: got %v, want an error wrapping context.Canceled", err)
	}
	got, _, _ := s.heartbeat(t, ms, outbox.Member{Owner: stays}, longTTL)
	expectOwners(t, "Heartbeat after a Heartbeat and a Leave with a cancelled context (they must change nothing)", got, stays)
}

func memberNoAlias[Tx any](t *testing.T, s *env[Tx]) {
	ms := s.membership(t)
	owner := s.owner("relay")
	in := []int{0, 1}
	got, _, _ := s.heartbeat(t, ms, outbox.Member{Owner: owner, Partitions: in, MaxPartitions: 2}, longTTL)
	expectMember(t, "Heartbeat", got, owner, []int{0, 1}, 2)
	// The caller reuses both slices: Heartbeat keeps neither m.Partitions
	// nor the slices it returned.
	in[0], in[1] = 2, 3
	got[findMember(got, owner)].Partitions[0] = 3
	got, _, _ = s.heartbeat(t, ms, outbox.Member{Owner: s.owner("other")}, longTTL)
	expectMember(t, "Heartbeat of another owner after the caller changed the Partitions slice it passed and the one it got back", got, owner, []int{0, 1}, 2)
}
