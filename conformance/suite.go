package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// Durations the suite uses against real servers. They are short so the
// whole suite runs in seconds, and every wait on them polls with a
// generous deadline instead of sleeping a fixed time, so a slow machine
// makes the suite slower, not flaky.
const (
	// shortTTL is the lease TTL of cases that wait for a lease to expire.
	shortTTL = 300 * time.Millisecond
	// longTTL is the lease TTL of cases that must not see it expire.
	longTTL = 30 * time.Second
	// scheduleAhead is how far ahead NotBefore is set, and the Delay
	// given to MarkFailed, when a case must see an entry become due by the
	// clock ("not due yet" alone uses an hour); see timing.go.
	scheduleAhead = 400 * time.Millisecond
	// waitLimit bounds every poll for something that must happen.
	waitLimit = 10 * time.Second
	// pollEvery is the interval of those polls.
	pollEvery = 20 * time.Millisecond
	// caseTimeout is the watchdog of one case: a hung backend fails the
	// case instead of hanging the test binary.
	caseTimeout = 60 * time.Second
	// topic is the Topic of the suite's entries.
	topic = "conformance"
)

// testCase is one named case of the suite.
type testCase[Tx any] struct {
	// group and name form the subtest name "group/name".
	group, name string
	// partitions is the Config.Partitions the case asks for (0 means 1).
	partitions int
	// archive is the Config.Archive the case asks for.
	archive bool
	run     func(t *testing.T, s *env[Tx])
}

// Run runs the conformance suite against the backend that newHarness
// makes. Every case is a parallel subtest named "Area/Behaviour" (for
// example "Append/VisibleOnlyAfterCommit" or "Fencing/StaleMarkSent") with
// a fresh Harness of its own, so a failure names the broken contract and
// one case can be rerun with -run.
//
// Cases for the optional interfaces ([outbox.Notifier], [outbox.Canceler],
// [outbox.Inspector], [outbox.Membership], [outbox.PartitionInspector],
// [outbox.Looker], the operators' [outbox.Lister], [outbox.Pauser] and
// [outbox.MemberLister], and [outbox.Exporter], [outbox.Importer],
// [outbox.Holder] and [outbox.Sealer] of moving an outbox, and
// [outbox.ArchiveJanitor], [outbox.ParkedPurger] and [outbox.HealthChecker]
// of retention and store health) are skipped,
// saying so, when the backend does not implement them (the History and
// Deferred cases read entries through [outbox.Looker]), the "PartitionCount" cases when the
// Harness does not implement [Reopener], and the "Corrupt" cases when it
// does not implement [Corrupter]. The "Relay" area runs
// [outbox.Relay] against the backend with a sink under the suite's
// control, with injected failures, several relays, lease takeovers and a
// relay whose clock is off.
//
// The suite uses real, short durations (lease TTLs of a few hundred
// milliseconds, entries scheduled a few hundred milliseconds ahead) and
// polls with deadlines, so it works against real servers with their own
// clocks. Most cases spend their time waiting, so run it with a high
// -parallel (16 or more) to finish in seconds.
func Run[Tx any](t *testing.T, newHarness NewHarness[Tx]) {
	t.Helper()
	var cases []testCase[Tx]
	cases = append(cases, appendCases[Tx]()...)
	cases = append(cases, fetchCases[Tx]()...)
	cases = append(cases, claimCases[Tx]()...)
	cases = append(cases, outcomeCases[Tx]()...)
	cases = append(cases, holdBackCases[Tx]()...)
	cases = append(cases, holdBackScaleCases[Tx]()...)
	cases = append(cases, onceCases[Tx]()...)
	cases = append(cases, leaseCases[Tx]()...)
	cases = append(cases, fencingCases[Tx]()...)
	cases = append(cases, argumentCases[Tx]()...)
	cases = append(cases, lifecycleCases[Tx]()...)
	cases = append(cases, concurrencyCases[Tx]()...)
	cases = append(cases, notifierCases[Tx]()...)
	cases = append(cases, cancelerCases[Tx]()...)
	cases = append(cases, inspectorCases[Tx]()...)
	cases = append(cases, membershipCases[Tx]()...)
	cases = append(cases, partitionInspectorCases[Tx]()...)
	cases = append(cases, lookerCases[Tx]()...)
	cases = append(cases, historyCases[Tx]()...)
	cases = append(cases, deferredCases[Tx]()...)
	cases = append(cases, listerCases[Tx]()...)
	cases = append(cases, collationCases[Tx]()...)
	cases = append(cases, pauserCases[Tx]()...)
	cases = append(cases, memberListerCases[Tx]()...)
	cases = append(cases, partitionCountCases[Tx]()...)
	cases = append(cases, corruptCases[Tx]()...)
	cases = append(cases, batchFetcherCases[Tx]()...)
	cases = append(cases, prefetcherCases[Tx]()...)
	cases = append(cases, moveCases[Tx]()...)
	cases = append(cases, auditCases[Tx]()...)
	cases = append(cases, relayCases[Tx]()...)
	cases = append(cases, relayOperateCases[Tx]()...)
	cases = append(cases, retentionCases[Tx]()...)

	var groups []string
	byGroup := map[string][]testCase[Tx]{}
	for _, c := range cases {
		if _, ok := byGroup[c.group]; !ok {
			groups = append(groups, c.group)
		}
		byGroup[c.group] = append(byGroup[c.group], c)
	}
	for _, g := range groups {
		t.Run(g, func(t *testing.T) {
			t.Parallel()
			for _, c := range byGroup[g] {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					runCase(t, newHarness, c)
				})
			}
		})
	}
}

func runCase[Tx any](t *testing.T, newHarness NewHarness[Tx], c testCase[Tx]) {
	parts := max(c.partitions, 1)
	h := newHarness(t, Config{Partitions: parts, Archive: c.archive})
	if h == nil {
		t.Fatal("conformance: NewHarness returned a nil Harness; return one or fail t")
	}
	b := h.Backend()
	if b == nil {
		t.Fatal("conformance: Harness.Backend returned nil")
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close at the end of the case: %v", err)
		}
	})
	if got := b.Partitions(); got != parts {
		t.Fatalf("Partitions() = %d, but the harness was asked for Config{Partitions: %d}", got, parts)
	}
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	s := &env[Tx]{h: h, b: b, ctx: ctx, parts: parts}
	c.run(t, s)
}

// env is what a case works with: the harness, its backend and the case's
// watchdog context.
type env[Tx any] struct {
	h     Harness[Tx]
	b     outbox.Backend[Tx]
	ctx   context.Context
	parts int
	seq   atomic.Int64
}

// owner returns a new, unique lease owner token with a readable prefix.
func (s *env[Tx]) owner(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, s.seq.Add(1))
}

// entry returns a valid entry with the given ID and key.
func entry(id, key string) outbox.Entry {
	return outbox.Entry{
		ID:      id,
		Topic:   topic,
		Key:     key,
		Payload: []byte("payload of " + id),
		Headers: map[string]string{"conformance-id": id},
	}
}

// keyed returns n entries of key with IDs prefix1..prefixN.
func keyed(prefix, key string, n int) []outbox.Entry {
	out := make([]outbox.Entry, n)
	for i := range out {
		out[i] = entry(fmt.Sprintf("%s%d", prefix, i+1), key)
	}
	return out
}

// begin starts a transaction or fails the case.
func (s *env[Tx]) begin(t *testing.T) Tx {
	t.Helper()
	tx, err := s.h.Begin(s.ctx)
	if err != nil {
		t.Fatalf("Harness.Begin: %v", err)
	}
	return tx
}

// appendCommit appends entries in a transaction of their own and commits
// it, failing the case on any error.
func (s *env[Tx]) appendCommit(t *testing.T, entries ...outbox.Entry) {
	t.Helper()
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, entries...); err != nil {
		_ = s.h.Rollback(s.ctx, tx)
		t.Fatalf("AppendInTx of %s: %v", describeIDs(entries), err)
	}
	if err := s.h.Commit(s.ctx, tx); err != nil {
		t.Fatalf("Harness.Commit after appending %s: %v", describeIDs(entries), err)
	}
}

// acquire takes partition for owner or fails the case.
func (s *env[Tx]) acquire(t *testing.T, partition int, owner string, ttl time.Duration) outbox.Lease {
	t.Helper()
	l, err := s.b.AcquireLease(s.ctx, partition, owner, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(partition %d, owner %q, ttl %v): %v", partition, owner, ttl, err)
	}
	checkLease(t, l, partition, owner)
	return l
}

func checkLease(t *testing.T, l outbox.Lease, partition int, owner string) {
	t.Helper()
	if l.Partition != partition || l.Owner != owner {
		t.Fatalf("AcquireLease(partition %d, owner %q) returned %s: the lease must name the partition and owner asked for", partition, owner, fmtLease(l))
	}
	if l.Expires.IsZero() {
		t.Fatalf("AcquireLease returned %s with a zero Expires", fmtLease(l))
	}
}

// acquireAfterExpiry polls AcquireLease for owner until the partition's
// current lease (of another owner) has expired, failing the case if it
// does not within waitLimit.
func (s *env[Tx]) acquireAfterExpiry(t *testing.T, partition int, owner string, ttl time.Duration) outbox.Lease {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		l, err := s.b.AcquireLease(s.ctx, partition, owner, ttl)
		if err == nil {
			checkLease(t, l, partition, owner)
			return l
		}
		if !errors.Is(err, outbox.ErrLeaseHeld) {
			t.Fatalf("AcquireLease(partition %d, owner %q) while waiting for the old lease to expire: got %v, want nil or an error wrapping ErrLeaseHeld", partition, owner, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("AcquireLease(partition %d, owner %q) still reports ErrLeaseHeld %v after the previous lease (ttl %v) should have expired", partition, owner, waitLimit, shortTTL)
		}
		s.sleep(t, pollEvery)
	}
}

// fetch calls FindPendingBatch or fails the case.
func (s *env[Tx]) fetch(t *testing.T, l outbox.Lease, limit int) []outbox.Entry {
	t.Helper()
	batch, err := s.b.FindPendingBatch(s.ctx, l, limit)
	if err != nil {
		t.Fatalf("FindPendingBatch(%s, limit %d): %v", fmtLease(l), limit, err)
	}
	if len(batch) > limit {
		t.Fatalf("FindPendingBatch(%s, limit %d) returned %d entries %v: more than the limit", fmtLease(l), limit, len(batch), ids(batch))
	}
	for _, e := range batch {
		if e.Partition != l.Partition {
			t.Fatalf("FindPendingBatch(%s) returned entry %s of partition %d", fmtLease(l), e.ID, e.Partition)
		}
	}
	return batch
}

func (s *env[Tx]) markSent(t *testing.T, l outbox.Lease, idList ...string) {
	t.Helper()
	if err := s.b.MarkSent(s.ctx, l, idList); err != nil {
		t.Fatalf("MarkSent(%s, %v): %v", fmtLease(l), idList, err)
	}
}

func (s *env[Tx]) markFailed(t *testing.T, l outbox.Lease, fs ...outbox.Failure) {
	t.Helper()
	if err := s.b.MarkFailed(s.ctx, l, fs); err != nil {
		t.Fatalf("MarkFailed(%s, %d failures): %v", fmtLease(l), len(fs), err)
	}
}

func (s *env[Tx]) release(t *testing.T, l outbox.Lease, idList ...string) {
	t.Helper()
	if err := s.b.Release(s.ctx, l, idList); err != nil {
		t.Fatalf("Release(%s, %v): %v", fmtLease(l), idList, err)
	}
}

func (s *env[Tx]) releaseLease(t *testing.T, l outbox.Lease) {
	t.Helper()
	if err := s.b.ReleaseLease(s.ctx, l); err != nil {
		t.Fatalf("ReleaseLease(%s): %v", fmtLease(l), err)
	}
}

// peek reports the entries of partition that are eligible now, in fetch
// order, without changing them: it takes the partition with a new owner,
// fetches everything, releases the entries and the lease. The partition
// must be free (or its lease expired).
func (s *env[Tx]) peek(t *testing.T, partition int) []outbox.Entry {
	t.Helper()
	l := s.acquireAfterExpiry(t, partition, s.owner("observer"), longTTL)
	batch := s.fetch(t, l, 10000)
	if len(batch) > 0 {
		s.release(t, l, ids(batch)...)
	}
	s.releaseLease(t, l)
	return batch
}

// sleep waits d or fails the case when the watchdog fires first.
func (s *env[Tx]) sleep(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-time.After(d):
	case <-s.ctx.Done():
		t.Fatalf("watchdog: the case ran longer than %v (a backend call hangs?)", caseTimeout)
	}
}

// fetchUntil polls FindPendingBatch on l until cond accepts a batch,
// releasing every batch it does not accept, and returns the accepted one.
// It fails the case with status() after waitLimit.
func (s *env[Tx]) fetchUntil(t *testing.T, l outbox.Lease, limit int, cond func([]outbox.Entry) bool, what string) []outbox.Entry {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	var last []outbox.Entry
	for {
		batch := s.fetch(t, l, limit)
		if cond(batch) {
			return batch
		}
		last = batch
		if len(batch) > 0 {
			s.release(t, l, ids(batch)...)
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; the last batch was %v", waitLimit, what, ids(last))
		}
		s.sleep(t, pollEvery)
	}
}

// keysByPartition returns a key of each of the n partitions:
// keys[p] is a key with outbox.PartitionOf(key, n) == p.
func keysByPartition(n int) []string {
	keys := make([]string, n)
	found := 0
	for i := 0; found < n; i++ {
		k := fmt.Sprintf("key-%d", i)
		if p := outbox.PartitionOf(k, n); keys[p] == "" {
			keys[p] = k
			found++
		}
	}
	return keys
}

// ids returns the IDs of entries in order.
func ids(entries []outbox.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}

func describeIDs(entries []outbox.Entry) string {
	if len(entries) > 8 {
		return fmt.Sprintf("%d entries (%s … %s)", len(entries), entries[0].ID, entries[len(entries)-1].ID)
	}
	return fmt.Sprint(ids(entries))
}

func fmtLease(l outbox.Lease) string {
	return fmt.Sprintf("lease{partition %d, owner %q, v%d}", l.Partition, l.Owner, l.Version)
}

// expectIDs fails the case unless got holds exactly the entries want, in
// that order.
func expectIDs(t *testing.T, what string, got []outbox.Entry, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if g := ids(got); !slices.Equal(g, want) {
		t.Fatalf("%s: got entries %v, want %v", what, g, want)
	}
}

// expectErr fails the case unless err wraps target.
func expectErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want an error wrapping %q", what, err, target)
	}
}

// sameEntry compares the caller-set fields of an appended entry with the
// entry the backend returned.
func sameEntry(want, got outbox.Entry) string {
	var diffs []string
	if got.ID != want.ID {
		diffs = append(diffs, fmt.Sprintf("ID %q, want %q", got.ID, want.ID))
	}
	if got.Topic != want.Topic {
		diffs = append(diffs, fmt.Sprintf("Topic %q, want %q", got.Topic, want.Topic))
	}
	if got.Key != want.Key {
		diffs = append(diffs, fmt.Sprintf("Key %q, want %q", got.Key, want.Key))
	}
	if string(got.Payload) != string(want.Payload) {
		diffs = append(diffs, fmt.Sprintf("Payload of %d bytes differs from the %d bytes appended%s", len(got.Payload), len(want.Payload), firstDiff(got.Payload, want.Payload)))
	}
	if len(got.Headers) != len(want.Headers) {
		diffs = append(diffs, fmt.Sprintf("Headers %q, want %q", got.Headers, want.Headers))
	} else {
		for k, v := range want.Headers {
			if gv, ok := got.Headers[k]; !ok || gv != v {
				diffs = append(diffs, fmt.Sprintf("Headers[%q] = %q (present %v), want %q", k, gv, ok, v))
			}
		}
	}
	return strings.Join(diffs, "; ")
}

func firstDiff(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf(" (first difference at byte %d: %#x, want %#x)", i, a[i], b[i])
		}
	}
	return ""
}

// due is a time before which a case must not see an entry scheduled at
// at: the suite allows this much skew between its clock and the server's.
const clockSkew = 150 * time.Millisecond
