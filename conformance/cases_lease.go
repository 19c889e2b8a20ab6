package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

func leaseCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Lease", name: "ExclusiveAcrossOwners", run: leaseExclusive[Tx]},
		{group: "Lease", name: "SameOwnerReacquireKeepsVersion", run: leaseReacquire[Tx]},
		{group: "Lease", name: "RenewExtends", run: leaseRenewExtends[Tx]},
		{group: "Lease", name: "ExpiryAllowsTakeoverWithHigherVersion", run: leaseTakeover[Tx]},
		{group: "Lease", name: "VersionsIncreaseAcrossReleases", run: leaseVersionsIncrease[Tx]},
		{group: "Lease", name: "ReleaseByOtherOwnerOrVersionIsNoop", run: leaseReleaseStranger[Tx]},
		{group: "Lease", name: "RenewAfterExpiryFails", run: leaseRenewAfterExpiry[Tx]},
		{group: "Lease", name: "PartitionsAreIndependent", partitions: 4, run: leasePartitionsIndependent[Tx]},
	}
}

func fencingCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Fencing", name: "StaleFindPendingBatch", run: fencingStaleFind[Tx]},
		{group: "Fencing", name: "StaleMarkSent", run: fencingStaleMarkSent[Tx]},
		{group: "Fencing", name: "StaleMarkFailed", run: fencingStaleMarkFailed[Tx]},
		{group: "Fencing", name: "StaleRelease", run: fencingStaleRelease[Tx]},
		{group: "Fencing", name: "StaleRenewLease", run: fencingStaleRenew[Tx]},
		{group: "Fencing", name: "StaleReleaseLease", run: fencingStaleReleaseLease[Tx]},
		{group: "Fencing", name: "ReleasedLeaseIsFenced", run: fencingReleased[Tx]},
		{group: "Fencing", name: "ForgedLeaseIsFenced", run: fencingForged[Tx]},
		{group: "Fencing", name: "ExpiredFindPendingBatch", run: fencingExpiredFind[Tx]},
		{group: "Fencing", name: "ExpiredMarkSent", run: fencingExpiredMarkSent[Tx]},
		{group: "Fencing", name: "ExpiredMarkFailed", run: fencingExpiredMarkFailed[Tx]},
		{group: "Fencing", name: "ExpiredRelease", run: fencingExpiredRelease[Tx]},
	}
}

func leaseExclusive[Tx any](t *testing.T, s *env[Tx]) {
	a := s.acquire(t, 0, "owner-a", longTTL)
	for _, other := range []string{"owner-b", "owner-c"} {
		l, err := s.b.AcquireLease(s.ctx, 0, other, longTTL)
		if !errors.Is(err, outbox.ErrLeaseHeld) {
			t.Fatalf("AcquireLease by %q while %s is live: got %s, %v; want an error wrapping ErrLeaseHeld", other, fmtLease(a), fmtLease(l), err)
		}
	}
	if _, err := s.b.RenewLease(s.ctx, a, longTTL); err != nil {
		t.Fatalf("RenewLease of %s after other owners were refused: %v (a refused acquire must not disturb the holder)", fmtLease(a), err)
	}
}

func leaseReacquire[Tx any](t *testing.T, s *env[Tx]) {
	a := s.acquire(t, 0, "owner-a", longTTL)
	again := s.acquire(t, 0, "owner-a", longTTL)
	if again.Version != a.Version {
		t.Fatalf("AcquireLease by the holder itself returned %s, want the version of its lease %s (a re-acquire extends, it does not change hands)", fmtLease(again), fmtLease(a))
	}
	if again.Expires.Before(a.Expires) {
		t.Fatalf("re-acquired lease expires at %v, before the original %v: it must be extended by ttl", again.Expires, a.Expires)
	}
	// The re-acquired lease is still the same lease: the first one is not
	// fenced out.
	s.appendCommit(t, entry("e1", ""))
	expectIDs(t, "fetch with the lease returned by the first AcquireLease after a re-acquire", s.fetch(t, a, 10), "e1")
}

func leaseRenewExtends[Tx any](t *testing.T, s *env[Tx]) {
	var r outbox.Lease
	a, expiredBy := s.shortLease(t, 0, "owner-a", func(l outbox.Lease) error {
		var err error
		r, err = s.b.RenewLease(s.ctx, l, longTTL)
		return err
	})
	if r.Partition != a.Partition || r.Owner != a.Owner || r.Version != a.Version {
		t.Fatalf("RenewLease(%s) returned %s: renewal must keep partition, owner and version", fmtLease(a), fmtLease(r))
	}
	if !r.Expires.After(a.Expires) {
		t.Fatalf("RenewLease(%s, %v) returned Expires %v, not after the original %v: a renewal extends the lease by ttl from now", fmtLease(a), longTTL, r.Expires, a.Expires)
	}
	r2, err := s.b.RenewLease(s.ctx, r, longTTL)
	if err != nil {
		t.Fatalf("RenewLease(%s) of the renewed lease: %v", fmtLease(r), err)
	}
	if r2.Version != a.Version || r2.Expires.Before(r.Expires) {
		t.Fatalf("second RenewLease returned %s expiring %v, after the first renewal's %v: want the same version and an expiry no earlier", fmtLease(r2), r2.Expires, r.Expires)
	}
	// Past the expiry the lease was acquired with, the renewed lease still
	// holds, and the original lease value still works.
	s.sleepUntil(t, expiredBy.Add(clockSkew))
	_, err = s.b.AcquireLease(s.ctx, 0, "owner-b", longTTL)
	expectErr(t, "AcquireLease by another owner after the renewed lease's original expiry", err, outbox.ErrLeaseHeld)
	s.appendCommit(t, entry("e1", ""))
	expectIDs(t, "fetch with the original lease value after renewals", s.fetch(t, a, 10), "e1")
}

func leaseTakeover[Tx any](t *testing.T, s *env[Tx]) {
	a := s.acquire(t, 0, "owner-a", shortTTL)
	b := s.acquireAfterExpiry(t, 0, "owner-b", longTTL)
	if b.Version <= a.Version {
		t.Fatalf("takeover %s does not have a higher version than the expired %s", fmtLease(b), fmtLease(a))
	}
	_, err := s.b.AcquireLease(s.ctx, 0, "owner-a", longTTL)
	expectErr(t, "AcquireLease by the former holder A after B took over", err, outbox.ErrLeaseHeld)
	if _, err := s.b.RenewLease(s.ctx, a, longTTL); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("RenewLease of expired, taken-over %s: got %v, want an error wrapping ErrLeaseLost", fmtLease(a), err)
	}
	if err := s.b.ReleaseLease(s.ctx, a); err != nil {
		t.Fatalf("ReleaseLease of expired, taken-over %s: got %v, want nil (a no-op)", fmtLease(a), err)
	}
	if _, err := s.b.RenewLease(s.ctx, b, longTTL); err != nil {
		t.Fatalf("RenewLease of the new holder %s after the old holder's release: %v (it must not have been freed)", fmtLease(b), err)
	}
}

func leaseVersionsIncrease[Tx any](t *testing.T, s *env[Tx]) {
	var prev outbox.Lease
	for i, owner := range []string{"owner-a", "owner-b", "owner-a", "owner-a", "owner-c"} {
		l := s.acquire(t, 0, owner, longTTL)
		if i > 0 && l.Version <= prev.Version {
			t.Fatalf("lease %d %s after releasing %s: versions must strictly increase each time the partition changes hands, releases included", i, fmtLease(l), fmtLease(prev))
		}
		s.releaseLease(t, l)
		prev = l
	}
}

func leaseReleaseStranger[Tx any](t *testing.T, s *env[Tx]) {
	a := s.acquire(t, 0, "owner-a", longTTL)
	for _, bad := range []outbox.Lease{
		{Partition: 0, Owner: "owner-b", Version: a.Version, Expires: a.Expires},
		{Partition: 0, Owner: "owner-a", Version: a.Version - 1, Expires: a.Expires},
		{Partition: 0, Owner: "owner-a", Version: a.Version + 1, Expires: a.Expires},
	} {
		if err := s.b.ReleaseLease(s.ctx, bad); err != nil {
			t.Fatalf("ReleaseLease(%s) while %s holds the partition: got %v, want nil (a no-op)", fmtLease(bad), fmtLease(a), err)
		}
		_, err := s.b.AcquireLease(s.ctx, 0, "owner-b", longTTL)
		expectErr(t, fmt.Sprintf("AcquireLease by owner-b after ReleaseLease(%s) (it must not free %s)", fmtLease(bad), fmtLease(a)), err, outbox.ErrLeaseHeld)
	}
	if _, err := s.b.RenewLease(s.ctx, a, longTTL); err != nil {
		t.Fatalf("RenewLease(%s) after strangers' releases: %v", fmtLease(a), err)
	}
}

func leaseRenewAfterExpiry[Tx any](t *testing.T, s *env[Tx]) {
	a := s.acquire(t, 0, "owner-a", shortTTL)
	// The server granted the lease before AcquireLease returned, so this
	// is past its expiry by the server's clock too (up to clockSkew).
	s.sleep(t, shortTTL+clockSkew)
	r, err := s.b.RenewLease(s.ctx, a, longTTL)
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("RenewLease(%s) %v after acquiring it with ttl %v, nobody else around: got %s, %v; want an error wrapping ErrLeaseLost (an expired lease cannot be renewed)", fmtLease(a), shortTTL+clockSkew, shortTTL, fmtLease(r), err)
	}
	b := s.acquire(t, 0, "owner-b", longTTL)
	if b.Version <= a.Version {
		t.Fatalf("lease %s after %s expired does not have a higher version", fmtLease(b), fmtLease(a))
	}
}

func leasePartitionsIndependent[Tx any](t *testing.T, s *env[Tx]) {
	var leases []outbox.Lease
	for p := range s.parts {
		leases = append(leases, s.acquire(t, p, fmt.Sprintf("owner-%d", p), longTTL))
	}
	for p := range s.parts {
		_, err := s.b.AcquireLease(s.ctx, p, "intruder", longTTL)
		expectErr(t, fmt.Sprintf("AcquireLease of partition %d held by %s", p, fmtLease(leases[p])), err, outbox.ErrLeaseHeld)
	}
	s.releaseLease(t, leases[1])
	s.acquire(t, 1, "intruder", longTTL)
	for _, p := range []int{0, 2, 3} {
		if _, err := s.b.RenewLease(s.ctx, leases[p], longTTL); err != nil {
			t.Fatalf("RenewLease(%s) after partition 1 changed hands: %v", fmtLease(leases[p]), err)
		}
	}
}

// staleSetup appends e1..e4 of key k and f1, lets lease A (owner-a) claim
// them all and expire, has B take over and claim them again, and marks e1
// sent by B. It returns A (stale) and B (current).
func staleSetup[Tx any](t *testing.T, s *env[Tx]) (stale, current outbox.Lease) {
	t.Helper()
	s.appendCommit(t, append(keyed("e", "k", 4), entry("f1", ""))...)
	a, batch, _ := s.shortLeaseFetch(t, 0, "owner-a", 10)
	expectIDs(t, "fetch by A", batch, "e1", "e2", "e3", "e4", "f1")
	b := s.acquireAfterExpiry(t, 0, "owner-b", longTTL)
	if b.Version <= a.Version {
		t.Fatalf("takeover %s does not have a higher version than the expired %s", fmtLease(b), fmtLease(a))
	}
	expectIDs(t, "fetch by B after taking over from A", s.fetch(t, b, 10), "e1", "e2", "e3", "e4", "f1")
	s.markSent(t, b, "e1")
	return a, b
}

// expectFenced fails the case unless err wraps ErrLeaseLost.
func expectFenced(t *testing.T, call string, stale, current outbox.Lease, err error) {
	t.Helper()
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("%s with stale %s while %s holds the partition: got %v, want an error wrapping ErrLeaseLost", call, fmtLease(stale), fmtLease(current), err)
	}
}

// finishAndPeek releases B's remaining claims and lease and returns what
// is pending on partition 0.
func finishAndPeek[Tx any](t *testing.T, s *env[Tx], b outbox.Lease, claimed ...string) []outbox.Entry {
	t.Helper()
	s.release(t, b, claimed...)
	s.releaseLease(t, b)
	return s.peek(t, 0)
}

func fencingStaleFind[Tx any](t *testing.T, s *env[Tx]) {
	a, b := staleSetup(t, s)
	s.appendCommit(t, entry("e5", "k"), entry("f2", ""))
	got, err := s.b.FindPendingBatch(s.ctx, a, 10)
	expectFenced(t, "FindPendingBatch", a, b, err)
	if len(got) > 0 {
		t.Fatalf("FindPendingBatch with stale %s returned entries %v", fmtLease(a), ids(got))
	}
	// A backend may or may not hand B its own unfinished claims (e2, e3,
	// e4, f1) again, but the new entries must be B's: the stale fetch
	// claimed nothing.
	got = s.fetch(t, b, 10)
	expectSubsequence(t, "fetch by B after the stale fetch (it must hold the new e5 and f2, besides at most B's own unfinished claims, in order: e5 is eligible, as no entry of key k was attempted, and a lease's own unfinished claims hold nothing back)", got,
		[]string{"e5", "f2"}, "e2", "e3", "e4", "f1", "e5", "f2")
	// The stale fetch changed nothing: B's claims and the new entries are
	// all pending, in order, untouched.
	rest := finishAndPeek(t, s, b, "e2", "e3", "e4", "f1", "e5", "f2")
	expectIDs(t, "pending entries after the stale fetch, once B released everything", rest, "e2", "e3", "e4", "f1", "e5", "f2")
	for _, e := range rest {
		if e.Attempts != 0 || e.LastError != "" {
			t.Fatalf("entry %s has Attempts %d, LastError %q after a stale FindPendingBatch; want 0, \"\"", e.ID, e.Attempts, e.LastError)
		}
	}
}

func fencingStaleMarkSent[Tx any](t *testing.T, s *env[Tx]) {
	a, b := staleSetup(t, s)
	expectFenced(t, "MarkSent([e2, e3])", a, b, s.b.MarkSent(s.ctx, a, []string{"e2", "e3"}))
	got := finishAndPeek(t, s, b, "e2", "e3", "e4", "f1")
	expectIDs(t, "pending entries after the stale MarkSent (it must change nothing)", got, "e2", "e3", "e4", "f1")
}

func fencingStaleMarkFailed[Tx any](t *testing.T, s *env[Tx]) {
	a, b := staleSetup(t, s)
	expectFenced(t, "MarkFailed(e1 sent by B, retry now)", a, b, s.b.MarkFailed(s.ctx, a, []outbox.Failure{{ID: "e1", Error: "stale", Delay: 0}}))
	expectFenced(t, "MarkFailed(e2 claimed by B, park)", a, b, s.b.MarkFailed(s.ctx, a, []outbox.Failure{{ID: "e2", Error: "stale", Park: true}}))
	expectFenced(t, "MarkFailed(f1 claimed by B, retry now)", a, b, s.b.MarkFailed(s.ctx, a, []outbox.Failure{{ID: "f1", Error: "stale", Delay: 0}}))
	got := finishAndPeek(t, s, b, "e2", "e3", "e4", "f1")
	expectIDs(t, "pending entries after the stale MarkFailed calls (the sent e1 must not come back, B's claims must be untouched)", got, "e2", "e3", "e4", "f1")
	for _, e := range got {
		if e.Attempts != 0 || e.LastError != "" {
			t.Fatalf("entry %s has Attempts %d, LastError %q after a stale MarkFailed; want 0, \"\"", e.ID, e.Attempts, e.LastError)
		}
	}
	if in, ok := s.b.(outbox.Inspector); ok {
		parked, err := in.Parked(s.ctx, "", 10)
		if err != nil {
			t.Fatalf("Parked: %v", err)
		}
		expectIDs(t, "Parked after a stale MarkFailed(Park)", parked)
	}
}

func fencingStaleRelease[Tx any](t *testing.T, s *env[Tx]) {
	a, b := staleSetup(t, s)
	expectFenced(t, "Release([e1 sent by B, e2 claimed by B])", a, b, s.b.Release(s.ctx, a, []string{"e1", "e2"}))
	s.markSent(t, b, "e2")
	got := finishAndPeek(t, s, b, "e3", "e4", "f1")
	expectIDs(t, "pending entries after the stale Release (the sent e1 must not come back)", got, "e3", "e4", "f1")
}

func fencingStaleRenew[Tx any](t *testing.T, s *env[Tx]) {
	a, b := staleSetup(t, s)
	r, err := s.b.RenewLease(s.ctx, a, longTTL)
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("RenewLease with stale %s while %s holds the partition: got %s, %v; want an error wrapping ErrLeaseLost", fmtLease(a), fmtLease(b), fmtLease(r), err)
	}
	_, err = s.b.AcquireLease(s.ctx, 0, "owner-c", longTTL)
	expectErr(t, "AcquireLease by owner-c after a stale renew", err, outbox.ErrLeaseHeld)
	if _, err := s.b.RenewLease(s.ctx, b, longTTL); err != nil {
		t.Fatalf("RenewLease by the current holder %s after a stale renew: %v", fmtLease(b), err)
	}
	s.markSent(t, b, "e2")
}

func fencingStaleReleaseLease[Tx any](t *testing.T, s *env[Tx]) {
	a, b := staleSetup(t, s)
	if err := s.b.ReleaseLease(s.ctx, a); err != nil {
		t.Fatalf("ReleaseLease with stale %s: got %v, want nil (a no-op)", fmtLease(a), err)
	}
	_, err := s.b.AcquireLease(s.ctx, 0, "owner-c", longTTL)
	expectErr(t, fmt.Sprintf("AcquireLease by owner-c after stale %s was released (it must not free %s)", fmtLease(a), fmtLease(b)), err, outbox.ErrLeaseHeld)
	s.markSent(t, b, "e2")
	got := finishAndPeek(t, s, b, "e3", "e4", "f1")
	expectIDs(t, "pending entries after B finished", got, "e3", "e4", "f1")
}

func fencingReleased[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, keyed("e", "k", 3)...)
	a := s.acquire(t, 0, "owner-a", longTTL)
	expectIDs(t, "fetch by A", s.fetch(t, a, 10), "e1", "e2", "e3")
	s.releaseLease(t, a)
	expectFenced(t, "MarkSent([e1]) after releasing the lease", a, outbox.Lease{}, s.b.MarkSent(s.ctx, a, []string{"e1"}))
	expectFenced(t, "MarkFailed(e2) after releasing the lease", a, outbox.Lease{}, s.b.MarkFailed(s.ctx, a, []outbox.Failure{{ID: "e2", Error: "x", Park: true}}))
	_, err := s.b.FindPendingBatch(s.ctx, a, 10)
	expectFenced(t, "FindPendingBatch after releasing the lease", a, outbox.Lease{}, err)
	if _, err := s.b.RenewLease(s.ctx, a, longTTL); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("RenewLease of released %s: got %v, want an error wrapping ErrLeaseLost", fmtLease(a), err)
	}
	expectIDs(t, "pending entries after calls with a released lease", s.peek(t, 0), "e1", "e2", "e3")
}

func fencingForged[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, keyed("e", "k", 2)...)
	a := s.acquire(t, 0, "owner-a", longTTL)
	expectIDs(t, "fetch by A", s.fetch(t, a, 10), "e1", "e2")
	for _, forged := range []outbox.Lease{
		{Partition: 0, Owner: "owner-a", Version: a.Version + 1, Expires: a.Expires},
		{Partition: 0, Owner: "owner-a", Version: a.Version - 1, Expires: a.Expires},
		{Partition: 0, Owner: "owner-x", Version: a.Version, Expires: a.Expires},
	} {
		_, err := s.b.FindPendingBatch(s.ctx, forged, 10)
		expectFenced(t, "FindPendingBatch", forged, a, err)
		expectFenced(t, "MarkSent([e1])", forged, a, s.b.MarkSent(s.ctx, forged, []string{"e1"}))
		expectFenced(t, "MarkFailed(e1, park)", forged, a, s.b.MarkFailed(s.ctx, forged, []outbox.Failure{{ID: "e1", Error: "x", Park: true}}))
		expectFenced(t, "Release([e1])", forged, a, s.b.Release(s.ctx, forged, []string{"e1"}))
		if _, err := s.b.RenewLease(s.ctx, forged, longTTL); !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("RenewLease(%s) while %s holds the partition: got %v, want an error wrapping ErrLeaseLost", fmtLease(forged), fmtLease(a), err)
		}
	}
	s.markSent(t, a, "e1", "e2")
	s.releaseLease(t, a)
	expectIDs(t, "pending entries after A sent both", s.peek(t, 0))
}

// expiredSetup appends e1..e3 of key k and f1, lets lease A (owner-a)
// claim them all and waits until A has expired, nobody taking the
// partition over. It returns A.
func expiredSetup[Tx any](t *testing.T, s *env[Tx]) outbox.Lease {
	t.Helper()
	s.appendCommit(t, append(keyed("e", "k", 3), entry("f1", ""))...)
	a, batch, expiredBy := s.shortLeaseFetch(t, 0, "owner-a", 10)
	expectIDs(t, "fetch by A", batch, "e1", "e2", "e3", "f1")
	s.sleepUntil(t, expiredBy.Add(clockSkew))
	return a
}

// expectExpiredFenced fails the case unless err wraps ErrLeaseLost.
func expectExpiredFenced(t *testing.T, call string, a outbox.Lease, err error) {
	t.Helper()
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("%s with %s after it expired, nobody having taken the partition over: got %v, want an error wrapping ErrLeaseLost (an expired lease is no longer held)", call, fmtLease(a), err)
	}
}

// expectUntouched fails the case unless partition 0 holds exactly want,
// pending, in that order, never attempted, and nothing is parked.
func expectUntouched[Tx any](t *testing.T, s *env[Tx], what string, want ...string) {
	t.Helper()
	got := s.peek(t, 0)
	expectIDs(t, what, got, want...)
	for _, e := range got {
		if e.Attempts != 0 || e.LastError != "" {
			t.Fatalf("%s: entry %s has Attempts %d, LastError %q; want 0, \"\"", what, e.ID, e.Attempts, e.LastError)
		}
	}
	if in, ok := s.b.(outbox.Inspector); ok {
		parked, err := in.Parked(s.ctx, "", 10)
		if err != nil {
			t.Fatalf("Parked: %v", err)
		}
		expectIDs(t, what+": Parked", parked)
	}
}

func fencingExpiredFind[Tx any](t *testing.T, s *env[Tx]) {
	a := expiredSetup(t, s)
	s.appendCommit(t, entry("e4", "k"), entry("f2", ""))
	got, err := s.b.FindPendingBatch(s.ctx, a, 10)
	expectExpiredFenced(t, "FindPendingBatch", a, err)
	if len(got) > 0 {
		t.Fatalf("FindPendingBatch with expired %s returned entries %v", fmtLease(a), ids(got))
	}
	expectUntouched(t, s, "pending entries after a FindPendingBatch with an expired lease (it must claim nothing)", "e1", "e2", "e3", "f1", "e4", "f2")
}

func fencingExpiredMarkSent[Tx any](t *testing.T, s *env[Tx]) {
	a := expiredSetup(t, s)
	expectExpiredFenced(t, "MarkSent([e1, f1])", a, s.b.MarkSent(s.ctx, a, []string{"e1", "f1"}))
	expectUntouched(t, s, "pending entries after a MarkSent with an expired lease (it must change nothing)", "e1", "e2", "e3", "f1")
}

func fencingExpiredMarkFailed[Tx any](t *testing.T, s *env[Tx]) {
	a := expiredSetup(t, s)
	expectExpiredFenced(t, "MarkFailed(e1 retry now, e2 park, f1 retry in an hour)", a, s.b.MarkFailed(s.ctx, a, []outbox.Failure{
		{ID: "e1", Error: "expired", Delay: 0},
		{ID: "e2", Error: "expired", Park: true},
		{ID: "f1", Error: "expired", Delay: time.Hour},
	}))
	expectUntouched(t, s, "pending entries after a MarkFailed with an expired lease (it must change nothing)", "e1", "e2", "e3", "f1")
}

func fencingExpiredRelease[Tx any](t *testing.T, s *env[Tx]) {
	a := expiredSetup(t, s)
	expectExpiredFenced(t, "Release([e1, f1])", a, s.b.Release(s.ctx, a, []string{"e1", "f1"}))
	expectUntouched(t, s, "pending entries after a Release with an expired lease", "e1", "e2", "e3", "f1")
}
