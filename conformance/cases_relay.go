package conformance

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

func relayCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Relay", name: "PerKeyOrderWithInjectedFailures", partitions: 2, run: relayInjectedFailures[Tx]},
		{group: "Relay", name: "PerKeyOrderWithRepeatedFailures", partitions: 2, run: relayRepeatedFailures[Tx]},
		{group: "Relay", name: "CrashBetweenPublishAndMarkIsTakenOver", partitions: 2, run: relayCrashTakeover[Tx]},
		{group: "Relay", name: "ConcurrentAppendersAndRelays", partitions: 4, run: relayStress[Tx]},
		{group: "Relay", name: "RetriesWaitByStoreClockWithRelayClockAhead", run: relayClockAhead[Tx]},
		{group: "Relay", name: "RetriesWaitByStoreClockWithRelayClockBehind", run: relayClockBehind[Tx]},
	}
}

// relayWait bounds how long a relay case waits for every entry to be
// delivered.
const relayWait = 20 * time.Second

// relayOptions are fast settings for relays under test.
func relayOptions(owner string) outbox.RelayOptions {
	return outbox.RelayOptions{
		Owner:            owner,
		BatchSize:        5,
		PollInterval:     20 * time.Millisecond,
		LeaseTTL:         600 * time.Millisecond,
		Backoff:          backoff.Policy{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond, Min: 5 * time.Millisecond, MaxAttempts: -1},
		BreakerThreshold: -1,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// entryState is what the recorder knows of an appended entry.
type entryState int

const (
	stateUncommitted entryState = iota // appended, commit not finished
	stateCommitted
	stateRolledBack
)

// recorder registers appended entries, plays the sink for any number of
// relays and checks per-key order as messages arrive.
type recorder struct {
	mu        sync.Mutex
	state     map[string]entryState
	key       map[string]string
	order     map[string][]string // key -> IDs in append order
	pos       map[string]int      // ID -> index in its key's order
	permanent map[string]bool
	failFirst func(id string) bool
	// failTimes, when set, is how many first attempts of an entry fail
	// (transiently), besides failFirst.
	failTimes  func(id string) int
	attempts   map[string]int
	delivered  map[string]int // successful publishes per ID
	firstBy    map[string]string
	violations []string
	deliveries int
}

func newRecorder(failFirstPercent uint32, permanent ...string) *recorder {
	r := &recorder{
		state:     map[string]entryState{},
		key:       map[string]string{},
		order:     map[string][]string{},
		pos:       map[string]int{},
		permanent: map[string]bool{},
		attempts:  map[string]int{},
		delivered: map[string]int{},
		firstBy:   map[string]string{},
	}
	for _, id := range permanent {
		r.permanent[id] = true
	}
	r.failFirst = func(id string) bool {
		h := fnv.New32a()
		h.Write([]byte(id))
		return h.Sum32()%100 < failFirstPercent
	}
	return r
}

// appended registers entries about to be committed, in append order.
func (r *recorder) appended(es ...outbox.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range es {
		r.state[e.ID] = stateUncommitted
		r.key[e.ID] = e.Key
		if e.Key != "" {
			r.pos[e.ID] = len(r.order[e.Key])
			r.order[e.Key] = append(r.order[e.Key], e.ID)
		}
	}
}

// settled records the outcome of the transaction that appended es.
func (r *recorder) settled(committed bool, es ...outbox.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range es {
		if committed {
			r.state[e.ID] = stateCommitted
		} else {
			r.state[e.ID] = stateRolledBack
		}
	}
}

// sink returns a Sink for the relay named name.
func (r *recorder) sink(name string) outbox.Sink {
	return outbox.SinkFunc(func(ctx context.Context, m outbox.Entry) error {
		return r.publish(name, m)
	})
}

func (r *recorder) publish(relay string, m outbox.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts[m.ID]++
	st, known := r.state[m.ID]
	if !known {
		r.violations = append(r.violations, fmt.Sprintf("%s published %q, which was never appended", relay, m.ID))
		return nil
	}
	if st == stateRolledBack {
		r.violations = append(r.violations, fmt.Sprintf("%s published %s from a rolled-back transaction", relay, m.ID))
	}
	if k := r.key[m.ID]; k != "" && r.delivered[m.ID] == 0 {
		// Per-key order: every earlier committed entry of the key must be
		// delivered (or, if it fails permanently, attempted) first.
		for _, prev := range r.order[k][:r.pos[m.ID]] {
			if r.state[prev] == stateRolledBack {
				continue
			}
			if r.permanent[prev] && r.attempts[prev] == 0 || !r.permanent[prev] && r.delivered[prev] == 0 {
				r.violations = append(r.violations, fmt.Sprintf("%s published %s of key %q before the earlier %s of that key was delivered (attempts of %s so far: %d)", relay, m.ID, k, prev, prev, r.attempts[prev]))
				break
			}
		}
	}
	if r.permanent[m.ID] {
		return backoff.Permanent(fmt.Errorf("conformance sink: %s fails permanently", m.ID))
	}
	if r.attempts[m.ID] == 1 && r.failFirst(m.ID) {
		return fmt.Errorf("conformance sink: injected transient failure of the first attempt of %s", m.ID)
	}
	if r.failTimes != nil && r.attempts[m.ID] <= r.failTimes(m.ID) {
		return fmt.Errorf("conformance sink: injected transient failure %d of %d of %s", r.attempts[m.ID], r.failTimes(m.ID), m.ID)
	}
	if r.delivered[m.ID] == 0 {
		r.firstBy[m.ID] = relay
	}
	r.delivered[m.ID]++
	r.deliveries++
	return nil
}

// missing lists committed entries that are not done yet: not delivered,
// or (failing permanently) never attempted.
func (r *recorder) missing() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, st := range r.state {
		if st != stateCommitted {
			continue
		}
		if r.permanent[id] && r.attempts[id] == 0 || !r.permanent[id] && r.delivered[id] == 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// check reports every violation and returns the number of duplicate
// deliveries.
func (r *recorder) check(t *testing.T) (duplicates int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Error(v)
	}
	for id, n := range r.delivered {
		if r.permanent[id] {
			t.Errorf("entry %s fails permanently but was delivered %d times", id, n)
		}
		duplicates += n - 1
	}
	return duplicates
}

// waitDone waits until every committed entry is done, failing the case
// with what is missing after relayWait.
func (r *recorder) waitDone(t *testing.T, ctx context.Context, more func() string) {
	t.Helper()
	deadline := time.Now().Add(relayWait)
	for {
		m := r.missing()
		if len(m) == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if len(m) > 20 {
				m = append(m[:20], fmt.Sprintf("… (%d in all)", len(m)))
			}
			extra := ""
			if more != nil {
				extra = "; " + more()
			}
			t.Fatalf("after %v these committed entries were still not delivered: %v%s", relayWait, m, extra)
		}
		time.Sleep(pollEvery)
	}
}

// startRelay builds and starts a relay, failing the case on error; the
// case's cleanup stops it.
func startRelay(t *testing.T, ctx context.Context, store outbox.Store, sink outbox.Sink, opts outbox.RelayOptions) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(store, sink, opts)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatalf("Relay.Start (%s): %v", opts.Owner, err)
	}
	t.Cleanup(func() { stopRelay(t, r) })
	return r
}

func stopRelay(t *testing.T, r *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Errorf("Relay.Stop (%s): %v", r.Owner(), err)
	}
}

// appendRecorded appends es in one transaction, registering them with rec,
// and commits (or, when rollback is set, rolls back).
func (s *env[Tx]) appendRecorded(ctx context.Context, rec *recorder, rollback bool, es ...outbox.Entry) error {
	tx, err := s.h.Begin(ctx)
	if err != nil {
		return fmt.Errorf("Begin: %w", err)
	}
	if err := s.b.AppendInTx(ctx, tx, es...); err != nil {
		_ = s.h.Rollback(ctx, tx)
		return fmt.Errorf("AppendInTx of %s: %w", describeIDs(es), err)
	}
	rec.appended(es...)
	if rollback {
		err = s.h.Rollback(ctx, tx)
		rec.settled(false, es...)
		return err
	}
	if err := s.h.Commit(ctx, tx); err != nil {
		rec.settled(false, es...)
		return fmt.Errorf("Commit: %w", err)
	}
	rec.settled(true, es...)
	return nil
}

func relayInjectedFailures[Tx any](t *testing.T, s *env[Tx]) {
	permanent := []string{"k1-05", "k3-00", "free-3"}
	rec := newRecorder(30, permanent...)
	var es []outbox.Entry
	for i := range 12 {
		for k := range 5 {
			es = append(es, entry(fmt.Sprintf("k%d-%02d", k, i), fmt.Sprintf("key-%d", k)))
		}
		if i < 8 {
			es = append(es, entry(fmt.Sprintf("free-%d", i), ""))
		}
	}
	for chunk := range slices.Chunk(es, 17) {
		if err := s.appendRecorded(s.ctx, rec, false, chunk...); err != nil {
			t.Fatal(err)
		}
	}
	r := startRelay(t, s.ctx, s.b, rec.sink("relay-1"), relayOptions("relay-1"))
	rec.waitDone(t, s.ctx, func() string { return fmt.Sprintf("relay stats %+v", r.Stats()) })
	if in, ok := s.b.(outbox.Inspector); ok {
		deadline := time.Now().Add(waitLimit)
		for {
			parked, err := in.Parked(s.ctx, "", 100)
			if err != nil {
				t.Fatalf("Parked: %v", err)
			}
			got := ids(parked)
			want := slices.Sorted(slices.Values(permanent))
			if slices.Equal(got, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Parked lists %v, want the entries that failed permanently %v", got, want)
			}
			s.sleep(t, pollEvery)
		}
	}
	stopRelay(t, r)
	dups := rec.check(t)
	t.Logf("%d entries delivered with ~30%% injected first-attempt failures and %d permanent failures; %d duplicate deliveries; relay stats %+v", len(es)-len(permanent), len(permanent), dups, r.Stats())
}

func relayRepeatedFailures[Tx any](t *testing.T, s *env[Tx]) {
	// Entries that fail their first two to four attempts, each followed by
	// later entries of their key: the relay retries them (never parks),
	// and the backend must hold their key back through every retry.
	rec := newRecorder(0)
	times := map[string]int{"k0-01": 3, "k1-00": 2, "k1-04": 4, "k2-02": 3, "k3-05": 2, "k0-06": 2}
	rec.failTimes = func(id string) int { return times[id] }
	var es []outbox.Entry
	for i := range 8 {
		for k := range 4 {
			es = append(es, entry(fmt.Sprintf("k%d-%02d", k, i), fmt.Sprintf("key-%d", k)))
		}
		if i%2 == 0 {
			es = append(es, entry(fmt.Sprintf("free-%d", i), ""))
		}
	}
	for chunk := range slices.Chunk(es, 9) {
		if err := s.appendRecorded(s.ctx, rec, false, chunk...); err != nil {
			t.Fatal(err)
		}
	}
	r := startRelay(t, s.ctx, s.b, rec.sink("relay-1"), relayOptions("relay-1"))
	rec.waitDone(t, s.ctx, func() string { return fmt.Sprintf("relay stats %+v", r.Stats()) })
	stopRelay(t, r)
	dups := rec.check(t)
	rec.mu.Lock()
	for id, n := range times {
		if got := rec.attempts[id]; got < n+1 {
			t.Errorf("entry %s was attempted %d times, want %d (it fails %d times, then succeeds)", id, got, n+1, n)
		}
	}
	rec.mu.Unlock()
	t.Logf("%d entries delivered, %d of them after 2 to 4 failures; %d duplicate deliveries; relay stats %+v", len(es), len(times), dups, r.Stats())
}

// crashableStore is a Store whose every call fails once crash is called,
// as if its relay's process died: its leases are never released and
// expire on their own.
type crashableStore struct {
	outbox.Store
	crashed atomic.Bool
}

var errCrashed = errors.New("conformance: the relay using this store was crashed by the test")

func (c *crashableStore) crash() { c.crashed.Store(true) }

func (c *crashableStore) down() error {
	if c.crashed.Load() {
		return errCrashed
	}
	return nil
}

func (c *crashableStore) AcquireLease(ctx context.Context, p int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if err := c.down(); err != nil {
		return outbox.Lease{}, err
	}
	return c.Store.AcquireLease(ctx, p, owner, ttl)
}

func (c *crashableStore) RenewLease(ctx context.Context, l outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if err := c.down(); err != nil {
		return outbox.Lease{}, err
	}
	return c.Store.RenewLease(ctx, l, ttl)
}

func (c *crashableStore) ReleaseLease(ctx context.Context, l outbox.Lease) error {
	if err := c.down(); err != nil {
		return err
	}
	return c.Store.ReleaseLease(ctx, l)
}

func (c *crashableStore) FindPendingBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.Entry, error) {
	if err := c.down(); err != nil {
		return nil, err
	}
	return c.Store.FindPendingBatch(ctx, l, limit)
}

func (c *crashableStore) MarkSent(ctx context.Context, l outbox.Lease, ids []string) error {
	if err := c.down(); err != nil {
		return err
	}
	return c.Store.MarkSent(ctx, l, ids)
}

func (c *crashableStore) MarkFailed(ctx context.Context, l outbox.Lease, fs []outbox.Failure) error {
	if err := c.down(); err != nil {
		return err
	}
	return c.Store.MarkFailed(ctx, l, fs)
}

func (c *crashableStore) Release(ctx context.Context, l outbox.Lease, ids []string) error {
	if err := c.down(); err != nil {
		return err
	}
	return c.Store.Release(ctx, l, ids)
}

// Close does not close the shared backend: the case does.
func (c *crashableStore) Close() error { return nil }

func relayCrashTakeover[Tx any](t *testing.T, s *env[Tx]) {
	rec := newRecorder(0)
	var first, second []outbox.Entry
	for i := range 20 {
		first = append(first, entry(fmt.Sprintf("a-%02d", i), fmt.Sprintf("key-%d", i%4)))
		second = append(second, entry(fmt.Sprintf("b-%02d", i), fmt.Sprintf("key-%d", i%4)))
	}
	if err := s.appendRecorded(s.ctx, rec, false, first...); err != nil {
		t.Fatal(err)
	}
	// relay-1 dies right after the sink acknowledged a-07: between publish
	// and mark, with its batch unfinished and its leases held.
	cs := &crashableStore{Store: s.b}
	crashed := make(chan struct{})
	var once sync.Once
	sink1 := outbox.SinkFunc(func(ctx context.Context, m outbox.Entry) error {
		if cs.crashed.Load() {
			return errCrashed
		}
		err := rec.publish("relay-1", m)
		if m.ID == "a-07" && err == nil {
			once.Do(func() { cs.crash(); close(crashed) })
		}
		return err
	})
	r1 := startRelay(t, s.ctx, cs, sink1, relayOptions("relay-1"))
	select {
	case <-crashed:
	case <-time.After(relayWait):
		t.Fatalf("relay-1 did not publish a-07 within %v; relay-1 stats %+v", relayWait, r1.Stats())
	}
	if err := s.appendRecorded(s.ctx, rec, false, second...); err != nil {
		t.Fatal(err)
	}
	// relay-1 holds leases it can no longer use or release; relay-2 gets
	// the partitions once they expire, with relay-1's unfinished claims.
	r2 := startRelay(t, s.ctx, s.b, rec.sink("relay-2"), relayOptions("relay-2"))
	rec.waitDone(t, s.ctx, func() string { return fmt.Sprintf("relay-2 stats %+v", r2.Stats()) })
	stopRelay(t, r2)
	dups := rec.check(t)
	// At least once: what relay-1 published but could not mark comes again;
	// at most the batches relay-1 had in flight (one per partition).
	if limit := relayOptions("").BatchSize * s.parts; dups > limit {
		t.Errorf("%d duplicate deliveries after one crash; want at most one batch per partition relay-1 held (%d)", dups, limit)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range second {
		if by := rec.firstBy[e.ID]; by != "relay-2" {
			t.Errorf("entry %s, appended after relay-1 crashed, was first delivered by %q, want relay-2", e.ID, by)
		}
	}
	t.Logf("takeover after a crash between publish and mark: %d duplicate deliveries; relay-1 stats %+v; relay-2 stats %+v", dups, r1.Stats(), r2.Stats())
}

func relayStress[Tx any](t *testing.T, s *env[Tx]) {
	const appenders, txs = 4, 20
	rec := newRecorder(10)
	ctx := s.ctx

	var progress atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	committed, rolledBack := atomic.Int64{}, atomic.Int64{}
	for a := range appenders {
		wg.Go(func() {
			for i := range txs {
				var es []outbox.Entry
				for j := range 1 + (a+i)%4 {
					key := fmt.Sprintf("g%d-k%d", a, (i+j)%3)
					if (i+j)%5 == 0 {
						key = ""
					}
					es = append(es, entry(fmt.Sprintf("g%d-t%02d-e%d", a, i, j), key))
				}
				rollback := (a*txs+i)%5 == 3
				if err := s.appendRecorded(ctx, rec, rollback, es...); err != nil {
					errs <- fmt.Errorf("appender %d: %w", a, err)
					return
				}
				if rollback {
					rolledBack.Add(int64(len(es)))
				} else {
					committed.Add(int64(len(es)))
				}
				progress.Add(1)
				time.Sleep(time.Duration(5+(a*7+i*3)%10) * time.Millisecond)
			}
		})
	}

	opts := func(owner string) outbox.RelayOptions {
		o := relayOptions(owner)
		o.MaxPartitions = 2
		return o
	}
	crashable := &crashableStore{Store: s.b}
	r1 := startRelay(t, ctx, crashable, rec.sink("relay-1"), opts("relay-1"))
	r2 := startRelay(t, ctx, s.b, rec.sink("relay-2"), opts("relay-2"))
	r3 := startRelay(t, ctx, s.b, rec.sink("relay-3"), opts("relay-3"))
	relays := []*outbox.Relay{r1, r2, r3}

	waitProgress := func(n int64) {
		for progress.Load() < n && ctx.Err() == nil {
			time.Sleep(pollEvery)
		}
	}
	waitProgress(appenders * txs / 3)
	crashable.crash() // relay-1 dies holding its leases
	waitProgress(appenders * txs * 2 / 3)
	stopRelay(t, r2) // relay-2 hands its partitions over
	r4 := startRelay(t, ctx, s.b, rec.sink("relay-4"), opts("relay-4"))
	relays = append(relays, r4)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	stats := func() string {
		var b strings.Builder
		for _, r := range relays {
			fmt.Fprintf(&b, "%s %+v; ", r.Owner(), r.Stats())
		}
		return b.String()
	}
	rec.waitDone(t, ctx, stats)
	for _, r := range relays[1:] {
		stopRelay(t, r)
	}
	dups := rec.check(t)
	t.Logf("%d appenders committed %d entries (%d more rolled back) while 4 relays ran, one crashed and one stopped: all delivered, %d duplicate deliveries; %s", appenders, committed.Load(), rolledBack.Load(), dups, stats())
}

// relayClockAhead runs relayStoreClock with a relay clock 10 minutes fast.
func relayClockAhead[Tx any](t *testing.T, s *env[Tx]) { relayStoreClock(t, s, 10*time.Minute) }

// relayClockBehind runs relayStoreClock with a relay clock 10 minutes slow.
func relayClockBehind[Tx any](t *testing.T, s *env[Tx]) { relayStoreClock(t, s, -10*time.Minute) }

// attemptLog records when a sink was called, by the suite's clock.
type attemptLog struct {
	mu    sync.Mutex
	times []time.Time
}

func (a *attemptLog) add(now time.Time) (n int, first time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.times = append(a.times, now)
	return len(a.times), a.times[0]
}

// gaps returns the times between consecutive attempts.
func (a *attemptLog) gaps() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]time.Duration, 0, len(a.times))
	for i := 1; i < len(a.times); i++ {
		out = append(out, a.times[i].Sub(a.times[i-1]))
	}
	return out
}

func (a *attemptLog) String() string {
	gaps := a.gaps()
	rounded := make([]time.Duration, len(gaps))
	for i, g := range gaps {
		rounded[i] = g.Round(time.Millisecond)
	}
	return fmt.Sprintf("%d attempts, %v apart", len(gaps)+1, rounded)
}

// relayStoreClock runs a relay whose clock (RelayOptions.Now) is off by
// shift against a sink that fails an entry with transient errors while an
// outage lasts. The relay asks for a fixed retry Delay; the store makes
// the entry due that long after MarkFailed by its own clock, so by the
// suite's clock the attempts are at least the Delay apart, the outage ends
// after a few of them and the entry is delivered, never parked. A store
// that made the entry due early lets the relay burn its attempts inside
// the outage and park the entry: the attempt limit is well above the
// attempts the outage allows at the Delay's spacing.
func relayStoreClock[Tx any](t *testing.T, s *env[Tx], shift time.Duration) {
	const (
		retryDelay  = 400 * time.Millisecond
		outage      = 5 * retryDelay / 2 // fails attempts at about 0, 1 and 2 Delays
		maxAttempts = 8
	)
	var log attemptLog
	delivered := make(chan struct{})
	var once sync.Once
	sink := outbox.SinkFunc(func(ctx context.Context, m outbox.Entry) error {
		n, first := log.add(time.Now())
		if since := time.Since(first); since < outage {
			return fmt.Errorf("conformance sink: injected transient failure of attempt %d of %s, %v into a %v outage", n, m.ID, since.Round(time.Millisecond), outage)
		}
		once.Do(func() { close(delivered) })
		return nil
	})
	s.appendCommit(t, entry("e1", "k"))
	opts := relayOptions(s.owner("relay"))
	opts.Now = func() time.Time { return time.Now().Add(shift) }
	opts.Backoff = backoff.Policy{Base: retryDelay, Max: retryDelay, Min: retryDelay, MaxAttempts: maxAttempts}
	r := startRelay(t, s.ctx, s.b, sink, opts)
	what := fmt.Sprintf("a relay whose clock is %v off retried e1 with Delay %v", shift, retryDelay)
	deadline := time.Now().Add(relayWait)
	for done := false; !done; {
		select {
		case <-delivered:
			done = true
		case <-time.After(pollEvery):
		case <-s.ctx.Done():
			t.Fatalf("watchdog: %s: %s; relay stats %+v", what, &log, r.Stats())
		}
		if st := r.Stats(); st.Parked > 0 {
			t.Fatalf("%s and parked it within a %v outage: the retries came before their Delay had passed by the store's clock (%s; relay stats %+v)", what, outage, &log, st)
		}
		if !done && time.Now().After(deadline) {
			t.Fatalf("%s: not delivered within %v though the sink failed it only for %v (%s; relay stats %+v)", what, relayWait, outage, &log, r.Stats())
		}
	}
	stopRelay(t, r)
	// The store makes e1 due retryDelay after MarkFailed, which comes after
	// the sink call, so consecutive attempts are at least retryDelay apart
	// by any one clock; clockSkew is the suite's tolerance.
	for i, gap := range log.gaps() {
		if gap < retryDelay-clockSkew {
			t.Errorf("%s: attempt %d came %v after attempt %d, want at least the Delay %v (less a tolerance of %v) (%s)",
				what, i+2, gap.Round(time.Millisecond), i+1, retryDelay, clockSkew, &log)
		}
	}
	if len(log.gaps()) == 0 {
		t.Errorf("%s: e1 was delivered at its first attempt, but the sink fails it for %v", what, outage)
	}
	t.Logf("%s: %s; relay stats %+v", what, &log, r.Stats())
}
