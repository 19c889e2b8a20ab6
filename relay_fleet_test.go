package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// fleetTTL is the lease TTL of the fleet tests (AcquireInterval is a third
// of it).
const fleetTTL = 3 * time.Second

// node is one relay's view of the shared memory backend: it counts the
// relay's store calls and can cut the relay off from the store, as a crash
// or a network partition would (the relay keeps running but every call
// fails, so it neither renews nor releases nor heartbeats).
type node struct {
	*memory.Backend
	dead                           atomic.Bool
	fetches, acquired, releases    atomic.Int64
	fetchesOf                      []atomic.Int64 // by partition
	heartbeats, failedAcquisitions atomic.Int64
}

func newNode(b *memory.Backend) *node {
	return &node{Backend: b, fetchesOf: make([]atomic.Int64, b.Partitions())}
}

var errCutOff = errors.New("node: cut off from the store")

func (n *node) AcquireLease(ctx context.Context, p int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if n.dead.Load() {
		return outbox.Lease{}, errCutOff
	}
	l, err := n.Backend.AcquireLease(ctx, p, owner, ttl)
	if err == nil {
		n.acquired.Add(1)
	} else {
		n.failedAcquisitions.Add(1)
	}
	return l, err
}

func (n *node) RenewLease(ctx context.Context, l outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if n.dead.Load() {
		return outbox.Lease{}, errCutOff
	}
	return n.Backend.RenewLease(ctx, l, ttl)
}

func (n *node) ReleaseLease(ctx context.Context, l outbox.Lease) error {
	if n.dead.Load() {
		return errCutOff
	}
	n.releases.Add(1)
	return n.Backend.ReleaseLease(ctx, l)
}

func (n *node) FindPendingBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.Entry, error) {
	if n.dead.Load() {
		return nil, errCutOff
	}
	n.fetches.Add(1)
	n.fetchesOf[l.Partition].Add(1)
	return n.Backend.FindPendingBatch(ctx, l, limit)
}

// FetchNext is FindPendingBatch, as the memory backend's is: the node is
// cut off from it, and counts it, the same way.
func (n *node) FetchNext(ctx context.Context, l outbox.Lease, limit int, _ []outbox.Entry) (outbox.Batch, error) {
	entries, err := n.FindPendingBatch(ctx, l, limit)
	return outbox.Batch{Entries: entries}, err
}

func (n *node) MarkSent(ctx context.Context, l outbox.Lease, ids []string) error {
	if n.dead.Load() {
		return errCutOff
	}
	return n.Backend.MarkSent(ctx, l, ids)
}

func (n *node) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	if n.dead.Load() {
		return nil, errCutOff
	}
	n.heartbeats.Add(1)
	return n.Backend.Heartbeat(ctx, m, ttl)
}

func (n *node) Leave(ctx context.Context, owner string) error {
	if n.dead.Load() {
		return errCutOff
	}
	return n.Backend.Leave(ctx, owner)
}

// fleet is a set of relays on one memory backend.
type fleet struct {
	t      *testing.T
	b      *memory.Backend
	opts   outbox.RelayOptions
	relays []*outbox.Relay
	nodes  []*node
	alive  []bool
}

func newFleet(t *testing.T, partitions int, opts outbox.RelayOptions) *fleet {
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = fleetTTL
	}
	return &fleet{t: t, b: memory.New(memory.Options{Partitions: partitions}), opts: opts}
}

// add starts a relay; it returns its index.
func (f *fleet) add() int {
	o := f.opts
	o.Owner = fmt.Sprintf("relay-%02d", len(f.relays))
	n := newNode(f.b)
	f.relays = append(f.relays, startRelay(f.t, n, &recorder{}, o))
	f.nodes = append(f.nodes, n)
	f.alive = append(f.alive, true)
	return len(f.relays) - 1
}

// stop stops relay i gracefully.
func (f *fleet) stop(i int) {
	if err := f.relays[i].Stop(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.alive[i] = false
}

// kill cuts relay i off from the store without a release: its leases and
// heartbeat record expire on their own.
func (f *fleet) kill(i int) {
	f.nodes[i].dead.Store(true)
	f.alive[i] = false
}

// held returns the partitions held by each live relay.
func (f *fleet) held() []int64 {
	var out []int64
	for i, r := range f.relays {
		if f.alive[i] {
			out = append(out, r.Stats().PartitionsHeld)
		}
	}
	return out
}

// balanced reports whether the live relays hold every partition between
// them, each ⌊P/N⌋ or ⌈P/N⌉, and each exactly the share it computed (so
// nothing is still moving).
func (f *fleet) balanced() bool {
	p, n := int64(f.b.Partitions()), int64(0)
	for i := range f.relays {
		if f.alive[i] {
			n++
		}
	}
	var sum int64
	for i, r := range f.relays {
		if !f.alive[i] {
			continue
		}
		st := r.Stats()
		if h := st.PartitionsHeld; h != st.PartitionsTarget || (h != p/n && h != (p+n-1)/n) || st.Members != n {
			return false
		}
		sum += st.PartitionsHeld
	}
	return sum == p
}

// allHeld reports whether the live relays hold every partition.
func (f *fleet) allHeld() bool {
	var sum int64
	for _, h := range f.held() {
		sum += h
	}
	return sum == int64(f.b.Partitions())
}

// await advances the clock until cond holds and returns how long it took;
// it fails the test after limit.
func (f *fleet) await(limit time.Duration, what string, cond func() bool) time.Duration {
	f.t.Helper()
	start := time.Now()
	waitFor(f.t, limit, what+fmt.Sprintf(" (held: %v)", f.held()), cond)
	return time.Since(start)
}

func TestFleetConvergesAndHeals(t *testing.T) {
	for _, tc := range []struct{ relays, partitions int }{{4, 16}, {20, 100}, {3, 7}} {
		t.Run(fmt.Sprintf("%dRelays%dPartitions", tc.relays, tc.partitions), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFleet(t, tc.partitions, outbox.RelayOptions{})
				for range tc.relays - 1 {
					f.add()
				}
				start := f.await(10*fleetTTL, "the first relays converging", f.balanced)

				// Steady membership: nothing changes hands (no flapping).
				var before int64
				for _, n := range f.nodes {
					before += n.acquired.Load() + n.releases.Load()
				}
				time.Sleep(10 * fleetTTL)
				var after int64
				for _, n := range f.nodes {
					after += n.acquired.Load() + n.releases.Load()
				}
				if after != before || !f.balanced() {
					t.Fatalf("under steady membership partitions changed hands (%d acquisitions and releases in 10 TTLs) or the spread broke: %v", after-before, f.held())
				}

				f.add()
				join := f.await(2*fleetTTL, "convergence after a join", f.balanced)
				f.stop(0)
				leave := f.await(2*fleetTTL, "convergence after a graceful leave", f.balanced)
				f.kill(1)
				relayed := f.await(2*fleetTTL, "every partition held again after a crash", f.allHeld)
				crash := relayed + f.await(2*fleetTTL, "convergence after a crash", f.balanced)
				t.Logf("%d relays on %d partitions, TTL %v: start %v, join %v, leave %v, crash: partitions held again after %v, balanced after %v",
					tc.relays, tc.partitions, fleetTTL, start, join, leave, relayed, crash)
				if relayed > fleetTTL+fleetTTL/2 {
					t.Errorf("a crashed relay's partitions were held again only after %v; want about one TTL (%v)", relayed, fleetTTL)
				}
			})
		})
	}
}

// TestFleetMaxPartitionsNeverStrands: with caps that cannot cover every
// partition, liveness wins over the cap.
func TestFleetMaxPartitionsNeverStrands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, 6, outbox.RelayOptions{MaxPartitions: 2})
		for range 3 {
			f.add()
		}
		f.await(4*fleetTTL, "three relays holding two partitions each", f.balanced)
		f.stop(2)
		f.await(2*fleetTTL, "the two survivors holding all six partitions", f.balanced)
		for i := range 2 {
			if got := f.relays[i].Stats().PartitionsTarget; got != 3 {
				t.Fatalf("relay %d aims at %d partitions, want 3 (over its cap of 2, since no partition may stay unowned)", i, got)
			}
		}
		// Every partition is relayed.
		for i := range 60 {
			appendAll(t, f.b, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: fmt.Sprint("k", i)})
		}
		waitFor(t, time.Minute, "every entry delivered", func() bool {
			st, err := f.b.Stats(context.Background())
			return err == nil && st.Pending == 0
		})
	})
}

// TestFleetMaxPartitionsWithinCaps: caps that cover every partition are
// kept, and the rest of the share goes to relays with room.
func TestFleetMaxPartitionsWithinCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 8})
		capped := startRelay(t, newNode(b), &recorder{}, outbox.RelayOptions{Owner: "a", LeaseTTL: fleetTTL, MaxPartitions: 1})
		free := startRelay(t, newNode(b), &recorder{}, outbox.RelayOptions{Owner: "b", LeaseTTL: fleetTTL})
		waitFor(t, 4*fleetTTL, "a capped at 1 and b holding the other 7", func() bool {
			return capped.Stats().PartitionsHeld == 1 && free.Stats().PartitionsHeld == 7
		})
	})
}

// TestFleetWakesOnlyThePartitionAppendedTo: 64 partitions over 4 relays,
// polling set long: appends to one partition cost one fetch each, on that
// partition only (they used to wake every idle worker of every relay).
func TestFleetWakesOnlyThePartitionAppendedTo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, 64, outbox.RelayOptions{PollInterval: time.Hour, LeaseTTL: time.Hour})
		for range 4 {
			f.add()
		}
		f.await(time.Hour, "four relays with 16 partitions each", f.balanced)
		synctest.Wait()
		key := "hot"
		part := outbox.PartitionOf(key, 64)
		var base, baseOn int64
		for _, n := range f.nodes {
			base += n.fetches.Load()
			baseOn += n.fetchesOf[part].Load()
		}
		const appends = 200
		for i := range appends {
			appendAll(t, f.b, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: key})
			synctest.Wait() // the relay publishes it before the next append
		}
		var fetches, on int64
		for _, n := range f.nodes {
			fetches += n.fetches.Load()
			on += n.fetchesOf[part].Load()
		}
		fetches -= base
		on -= baseOn
		if st, _ := f.b.Stats(context.Background()); st.Pending != 0 {
			t.Fatalf("%d entries still pending", st.Pending)
		}
		if fetches != on {
			t.Errorf("%d fetches on other partitions than %d, which alone was appended to", fetches-on, part)
		}
		t.Logf("%d fetches for %d appends to partition %d of 64 over 4 relays (%.2f per append)", fetches, appends, part, float64(fetches)/appends)
		if per := float64(fetches) / appends; per > 1.1 {
			t.Errorf("%.2f fetches per append (%d for %d appends); want at most 1.1", per, fetches, appends)
		}
	})
}

// TestFleetWithoutMembershipLogsAndTakesEverything: a store without
// Membership (here: only the Store methods of the memory backend) still
// works, one relay taking what it can.
func TestFleetWithoutMembershipTakesEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 4})
		r := startRelay(t, storeOnly{b}, &recorder{}, outbox.RelayOptions{LeaseTTL: fleetTTL})
		waitFor(t, time.Minute, "the relay holding all 4 partitions", func() bool { return r.Stats().PartitionsHeld == 4 })
		if got := r.Stats().Members; got != 0 {
			t.Fatalf("Members = %d without Membership, want 0", got)
		}
	})
}

// storeOnly hides every optional interface of a store.
type storeOnly struct{ outbox.Store }
