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

// The suite runs on loaded CI machines, so no case may depend on how fast
// it runs. The rules the cases follow:
//
//   - A step that only needs a lease to stay valid uses longTTL.
//   - A case that needs a lease to expire with claims uses shortLease: it
//     starts with shortTTL and, when the machine was too slow to use the
//     lease before it expired, tries again with twice the TTL.
//   - "Not due yet" is proven with times an hour ahead; "due" with times an
//     hour ago. Only a case that must see an entry become due by the clock
//     schedules it scheduleAhead ahead; it then judges an early fetch by
//     when the fetch returned (surelyBefore), which a slow machine can only
//     make later, never earlier.
//   - A case whose expected order depends on a step finishing before a
//     scheduled time checks that it did, and otherwise reruns with twice
//     the margin (withMargin).
//   - "Not much after" (an entry due, a lease or a membership record
//     ended) is judged by a call that starts clockSkew after the moment by
//     the suite's clock: NotBefore, or the return of the call that set a
//     Delay or a ttl plus that duration (the store computed its time
//     during the call, so the clocks' offset cancels out). A slow machine
//     only makes the call start later, which can only make the answer
//     right.

// maxShortTTL bounds the TTL shortLease doubles to.
const maxShortTTL = 16 * shortTTL

// marginTries is how often withMargin doubles the margin.
const marginTries = 4

// shortLease acquires partition for owner with shortTTL and calls use with
// the lease; use makes the lease-fenced calls the case needs while the
// lease is live and returns the first error of one of them. When that
// error wraps ErrLeaseLost and the lease may really have expired by then
// (the machine is too slow for shortTTL), shortLease tries again with a new
// lease of twice the TTL (use must be safe to repeat). It returns the lease
// and a time by which the lease has expired by the backend's clock unless
// it was renewed.
func (s *env[Tx]) shortLease(t *testing.T, partition int, owner string, use func(outbox.Lease) error) (lease outbox.Lease, expiredBy time.Time) {
	t.Helper()
	for ttl := shortTTL; ; ttl *= 2 {
		start := time.Now()
		l, err := s.b.AcquireLease(s.ctx, partition, owner, ttl)
		if err != nil {
			t.Fatalf("AcquireLease(partition %d, owner %q, ttl %v): %v", partition, owner, ttl, err)
		}
		checkLease(t, l, partition, owner)
		// The backend granted the lease before AcquireLease returned, so
		// it ends at the latest ttl after now.
		granted := time.Now()
		err = use(l)
		if err == nil {
			return l, granted.Add(ttl)
		}
		if !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("with %s (ttl %v): %v", fmtLease(l), ttl, err)
		}
		if elapsed := time.Since(start); elapsed < ttl {
			t.Fatalf("with %s: %v only %v after asking for the lease with ttl %v: a live lease was reported lost", fmtLease(l), err, elapsed, ttl)
		}
		if ttl >= maxShortTTL {
			t.Fatalf("with %s: %v; the machine was too slow to use a lease of ttl %v before it expired", fmtLease(l), err, ttl)
		}
		t.Logf("slow machine: %s expired before the case could use it (%v); trying again with ttl %v", fmtLease(l), err, 2*ttl)
	}
}

// shortLeaseFetch is shortLease whose use is one FindPendingBatch of up to
// limit entries; it also returns that batch.
func (s *env[Tx]) shortLeaseFetch(t *testing.T, partition int, owner string, limit int) (outbox.Lease, []outbox.Entry, time.Time) {
	t.Helper()
	var batch []outbox.Entry
	l, expiredBy := s.shortLease(t, partition, owner, func(l outbox.Lease) error {
		var err error
		batch, err = s.b.FindPendingBatch(s.ctx, l, limit)
		return err
	})
	if len(batch) > limit {
		t.Fatalf("FindPendingBatch(%s, limit %d) returned %d entries %v: more than the limit", fmtLease(l), limit, len(batch), ids(batch))
	}
	return l, batch, expiredBy
}

// sleepUntil waits until the clock passes at, or fails the case when the
// watchdog fires first.
func (s *env[Tx]) sleepUntil(t *testing.T, at time.Time) {
	t.Helper()
	if d := time.Until(at); d > 0 {
		s.sleep(t, d)
	}
}

// surelyBefore reports whether a call that returned at returned (by the
// suite's clock) was answered before due by the backend's clock, allowing
// clockSkew. A fetch that returned an entry due at due is early if
// surelyBefore(returned, due); an append whose commit returned at returned
// made its entries due before due. A slow machine makes returned later, so
// it can only make the answer false (inconclusive), never wrongly true.
func surelyBefore(returned, due time.Time) bool {
	return returned.Before(due.Add(-clockSkew))
}

// withMargin runs try with the margin scheduleAhead and, while try reports
// that the machine was too slow for the margin to decide anything (it
// returns false), again with twice the margin, marginTries times in all.
// Each try gets its own ID prefix, so it does not see the entries of the
// tries before as its own. try fails the case itself on a violation.
func (s *env[Tx]) withMargin(t *testing.T, what string, try func(prefix string, ahead time.Duration) bool) {
	t.Helper()
	ahead := scheduleAhead
	for i := 1; ; i++ {
		if try(fmt.Sprintf("t%d-", i), ahead) {
			return
		}
		if i == marginTries {
			t.Fatalf("%s: the machine was too slow for every margin up to %v", what, ahead)
		}
		t.Logf("%s: inconclusive with a margin of %v (the machine is slow); trying again with %v", what, ahead, 2*ahead)
		ahead *= 2
	}
}

// only returns the entries of batch whose ID starts with prefix.
func only(batch []outbox.Entry, prefix string) []outbox.Entry {
	var out []outbox.Entry
	for _, e := range batch {
		if strings.HasPrefix(e.ID, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// drainQuiet empties ch until it has been quiet for quiet, failing the
// case if it never is within waitLimit or is closed.
func drainQuiet(t *testing.T, ch <-chan int, quiet time.Duration) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		got, closed := drainFor(ch, quiet)
		if closed {
			t.Fatal("the Notifications channel was closed while its context is live")
		}
		if len(got) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Notifications channel kept receiving values for %v with no appends going on", waitLimit)
		}
	}
}

// expectSubsequence fails the case unless got holds every entry of must
// and otherwise only entries of allowed, in the order of allowed (each at
// most once). It checks batches where the SPI leaves a choice, such as
// whether a lease is handed its own unfinished claims again.
func expectSubsequence(t *testing.T, what string, got []outbox.Entry, must []string, allowed ...string) {
	t.Helper()
	g := ids(got)
	i := 0
	for _, id := range g {
		for i < len(allowed) && allowed[i] != id {
			i++
		}
		if i == len(allowed) {
			t.Fatalf("%s: got entries %v, want %v and otherwise only entries of %v, in that order", what, g, must, allowed)
		}
		i++
	}
	for _, id := range must {
		if !slices.Contains(g, id) {
			t.Fatalf("%s: got entries %v, which lack %s; want %v and otherwise only entries of %v, in that order", what, g, id, must, allowed)
		}
	}
}
