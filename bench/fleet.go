package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox"
)

// The fleet part of W5: 20 relays sharing 100 partitions through the
// store's outbox.Membership. It measures the spread of the partitions once
// the fleet has converged, the aggregate drain rate against one relay, the
// time until the partitions of a relay cut off from the store deliver again,
// and how many fetches an append costs when polling is set long.
const (
	fleetRelays     = 20
	fleetPartitions = 100
	// fleetTTL is the LeaseTTL of the fleet (AcquireInterval is the
	// default, a third of it): short, so the fleet converges and recovers
	// in seconds.
	fleetTTL = 3 * time.Second
	// fleetArrivals is the steady arrival rate (entries/s, over all
	// partitions) while one relay is cut off.
	fleetArrivals = 500
	// fleetWait bounds every wait of the fleet workloads (convergence,
	// recovery).
	fleetWait = 30 * time.Second

	// The fetches-per-append scenario: fetchRelays relays on
	// fetchPartitions partitions, appends one per transaction at
	// fetchRate per second.
	fetchRelays     = 4
	fetchPartitions = 64
	fetchRate       = 100
)

// errCutOff is what every store call of a relay cut off from the store
// returns. It does not wrap outbox.ErrLeaseLost: the relay cannot tell a
// crashed store from a lost lease, as with a real network partition.
var errCutOff = errors.New("bench: this relay is cut off from the store (simulated crash)")

// fleetNode is one relay's handle on the store of a fleet workload: the
// Store, Membership, Notifier and Inspector of the backend (so the relay
// behaves as on the backend itself), plus what the harness needs around
// them. It counts the FindPendingBatch calls that reach the
// store; it records every lease in the fleet's ledger; while the gate is
// closed, FindPendingBatch returns an empty batch without asking the store
// (the fleet holds its leases while a backlog is filled); and once cut, every
// call fails and no notification is passed on, so the relay neither renews
// nor releases nor heartbeats. Cutting models a relay process that crashed
// or lost the network to the store, in process: the relay itself keeps
// running (and its sink keeps working) but cannot reach the store. A real
// process kill belongs to the chaos suite.
type fleetNode struct {
	store   outbox.Store
	members outbox.Membership
	notes   outbox.Notifier
	insp    outbox.Inspector // for the relay's stats sampling
	ledger  *leaseLedger
	gate    *gate
	cut     atomic.Bool
	fetches atomic.Int64
}

var (
	_ outbox.Store      = (*fleetNode)(nil)
	_ outbox.Membership = (*fleetNode)(nil)
	_ outbox.Notifier   = (*fleetNode)(nil)
	_ outbox.Inspector  = (*fleetNode)(nil)
)

func (n *fleetNode) Partitions() int { return n.store.Partitions() }

func (n *fleetNode) AcquireLease(ctx context.Context, p int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if n.cut.Load() {
		return outbox.Lease{}, errCutOff
	}
	l, err := n.store.AcquireLease(ctx, p, owner, ttl)
	if err == nil {
		n.ledger.acquired(l)
	}
	return l, err
}

func (n *fleetNode) RenewLease(ctx context.Context, l outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if n.cut.Load() {
		return outbox.Lease{}, errCutOff
	}
	return n.store.RenewLease(ctx, l, ttl)
}

func (n *fleetNode) ReleaseLease(ctx context.Context, l outbox.Lease) error {
	if n.cut.Load() {
		return errCutOff
	}
	// Recorded before the call, so an acquire by another relay right after
	// the store freed the partition never looks like a takeover.
	undo := n.ledger.released(l)
	err := n.store.ReleaseLease(ctx, l)
	if err != nil {
		undo()
	}
	return err
}

func (n *fleetNode) FindPendingBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.Entry, error) {
	if n.cut.Load() {
		return nil, errCutOff
	}
	if !n.gate.isOpen() {
		return nil, nil
	}
	n.fetches.Add(1)
	return n.store.FindPendingBatch(ctx, l, limit)
}

func (n *fleetNode) MarkSent(ctx context.Context, l outbox.Lease, ids []string) error {
	if n.cut.Load() {
		return errCutOff
	}
	return n.store.MarkSent(ctx, l, ids)
}

func (n *fleetNode) MarkFailed(ctx context.Context, l outbox.Lease, fs []outbox.Failure) error {
	if n.cut.Load() {
		return errCutOff
	}
	return n.store.MarkFailed(ctx, l, fs)
}

func (n *fleetNode) Release(ctx context.Context, l outbox.Lease, ids []string) error {
	if n.cut.Load() {
		return errCutOff
	}
	return n.store.Release(ctx, l, ids)
}

// Close does nothing: the instance closes the backend.
func (n *fleetNode) Close() error { return nil }

func (n *fleetNode) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	if n.cut.Load() {
		return nil, errCutOff
	}
	return n.members.Heartbeat(ctx, m, ttl)
}

func (n *fleetNode) Leave(ctx context.Context, owner string) error {
	if n.cut.Load() {
		return errCutOff
	}
	return n.members.Leave(ctx, owner)
}

func (n *fleetNode) Stats(ctx context.Context) (outbox.Stats, error) {
	if n.cut.Load() {
		return outbox.Stats{}, errCutOff
	}
	return n.insp.Stats(ctx)
}

func (n *fleetNode) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	if n.cut.Load() {
		return nil, errCutOff
	}
	return n.insp.Parked(ctx, after, limit)
}

func (n *fleetNode) Requeue(ctx context.Context, ids ...string) (int, error) {
	if n.cut.Load() {
		return 0, errCutOff
	}
	return n.insp.Requeue(ctx, ids...)
}

// Notifications passes the backend's notifications on until the node is
// cut off.
func (n *fleetNode) Notifications(ctx context.Context) (<-chan int, error) {
	if n.cut.Load() {
		return nil, errCutOff
	}
	in, err := n.notes.Notifications(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan int, cap(in))
	go func() {
		defer close(out)
		for p := range in {
			if n.cut.Load() {
				continue
			}
			select {
			case out <- p:
			default: // a hint: drop it rather than block, as the backends do
			}
		}
	}()
	return out, nil
}

// gate holds a fleet's fetches back; a nil gate is open.
type gate struct{ open atomic.Bool }

func (g *gate) isOpen() bool { return g == nil || g.open.Load() }

// leaseLedger follows the leases of every partition of a fleet: who holds
// each one, and how often a lease was taken over (or taken again by its own
// owner) without having been released. Only such a takeover can make the
// relays deliver an entry twice: the holder may have published its claimed
// batch without recording it, and at most that one batch comes back. The
// ledger bounds a fleet's duplicates by takeovers × BatchSize.
type leaseLedger struct {
	mu        sync.Mutex
	last      map[int]ledgerLease
	takeovers int
}

type ledgerLease struct {
	owner    string
	version  int64
	released bool
}

func newLeaseLedger() *leaseLedger { return &leaseLedger{last: map[int]ledgerLease{}} }

func (lg *leaseLedger) acquired(l outbox.Lease) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if prev, ok := lg.last[l.Partition]; ok && !prev.released {
		// Expired and taken over, or abandoned by its holder after a
		// failed write and taken again (the relay then releases and
		// acquires once more, to return the old claims).
		lg.takeovers++
	}
	lg.last[l.Partition] = ledgerLease{owner: l.Owner, version: l.Version}
}

// released records a release before it is made; undo takes it back when
// the release failed.
func (lg *leaseLedger) released(l outbox.Lease) (undo func()) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	cur, ok := lg.last[l.Partition]
	if !ok || cur.owner != l.Owner || cur.version != l.Version || cur.released {
		return func() {}
	}
	cur.released = true
	lg.last[l.Partition] = cur
	return func() {
		lg.mu.Lock()
		defer lg.mu.Unlock()
		if c := lg.last[l.Partition]; c.owner == l.Owner && c.version == l.Version {
			c.released = false
			lg.last[l.Partition] = c
		}
	}
}

// heldBy lists the partitions whose last lease owner took and has not
// released, ascending.
func (lg *leaseLedger) heldBy(owner string) []int {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	var ps []int
	for p, l := range lg.last {
		if l.owner == owner && !l.released {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

func (lg *leaseLedger) takeoverCount() int {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	return lg.takeovers
}

// fleet is a set of relays on one store, each through its own fleetNode.
type fleet struct {
	relays []*outbox.Relay
	nodes  []*fleetNode
	ledger *leaseLedger
	gate   *gate
	opts   outbox.RelayOptions
}

// newFleet builds n relays over store (which must be an outbox.Membership,
// an outbox.Notifier and an outbox.Inspector, as all our backends are) into
// sink. Owners are
// "bench-fleet-00", "bench-fleet-01", … A gated fleet fetches nothing until
// openGate.
func newFleet(store outbox.Store, sink outbox.Sink, n int, gated bool, extra func(o *outbox.RelayOptions)) (*fleet, error) {
	members, ok := store.(outbox.Membership)
	if !ok {
		return nil, errors.New("the backend is not an outbox.Membership")
	}
	notes, ok := store.(outbox.Notifier)
	if !ok {
		return nil, errors.New("the backend is not an outbox.Notifier")
	}
	insp, ok := store.(outbox.Inspector)
	if !ok {
		return nil, errors.New("the backend is not an outbox.Inspector")
	}
	f := &fleet{ledger: newLeaseLedger(), opts: relayOptions(extra)}
	if f.opts.BatchSize == 0 {
		f.opts.BatchSize = 500 // the relay's default, explicit for the duplicates bound
	}
	if gated {
		f.gate = &gate{}
	}
	for i := range n {
		node := &fleetNode{store: store, members: members, notes: notes, insp: insp, ledger: f.ledger, gate: f.gate}
		o := f.opts
		o.Owner = fmt.Sprintf("bench-fleet-%02d", i)
		r, err := outbox.NewRelay(node, sink, o)
		if err != nil {
			return nil, err
		}
		f.relays = append(f.relays, r)
		f.nodes = append(f.nodes, node)
	}
	return f, nil
}

func (f *fleet) start(ctx context.Context) error {
	for _, r := range f.relays {
		if err := r.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// openGate lets the fleet fetch and wakes every worker (the fill's
// notifications found the gate closed).
func (f *fleet) openGate() {
	f.gate.open.Store(true)
	for _, r := range f.relays {
		r.Notify()
	}
}

// stop stops every relay at once (one after another, the relays still
// running would take over the partitions of those stopping).
func (f *fleet) stop(s *Suite) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range f.relays {
		wg.Go(func() {
			if err := r.Stop(ctx); err != nil {
				s.logf("relay stop: %v", err)
			}
		})
	}
	wg.Wait()
}

// fetches is the number of FindPendingBatch calls that reached the store.
func (f *fleet) fetches() int64 {
	var n int64
	for _, node := range f.nodes {
		n += node.fetches.Load()
	}
	return n
}

// spread is the fleet's state at one moment: the partitions held in all,
// the fewest and most held by one live relay, and whether every live relay
// sees every other one and holds its share.
type spread struct {
	sum, lo, hi int
	balanced    bool
}

func (f *fleet) spread() spread {
	live := 0
	for _, node := range f.nodes {
		if !node.cut.Load() {
			live++
		}
	}
	sp := spread{lo: -1, balanced: true}
	for i, r := range f.relays {
		if f.nodes[i].cut.Load() {
			continue
		}
		st := r.Stats()
		h := int(st.PartitionsHeld)
		sp.sum += h
		if sp.lo < 0 || h < sp.lo {
			sp.lo = h
		}
		sp.hi = max(sp.hi, h)
		if st.PartitionsHeld != st.PartitionsTarget || st.Members != int64(live) {
			sp.balanced = false
		}
	}
	return sp
}

// waitConverged waits until every one of partitions is held and every live
// relay holds its share (and sees the whole fleet). It returns the spread
// then, the time from since until every partition was first held, and until
// convergence.
func (f *fleet) waitConverged(ctx context.Context, partitions int, since time.Time) (spread, time.Duration, time.Duration, error) {
	var allHeld time.Duration
	deadline := since.Add(fleetWait)
	for {
		sp := f.spread()
		now := time.Now()
		if sp.sum == partitions && allHeld == 0 {
			allHeld = now.Sub(since)
		}
		if sp.sum == partitions && sp.balanced {
			return sp, allHeld, now.Sub(since), nil
		}
		if err := ctx.Err(); err != nil {
			return sp, 0, 0, err
		}
		if now.After(deadline) {
			return sp, 0, 0, fmt.Errorf("the fleet did not converge within %s: %d of %d partitions held, %d to %d per relay, balanced %v", fleetWait, sp.sum, partitions, sp.lo, sp.hi, sp.balanced)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// check checks a fleet's counts: nothing lost, nothing foreign, per-key
// order kept, and no more duplicates than its lease takeovers allow (one
// batch each).
func (f *fleet) check(c Counts) error {
	if err := c.check(true); err != nil {
		return err
	}
	t := f.ledger.takeoverCount()
	if bound := t * f.opts.BatchSize; c.Duplicates > bound {
		return fmt.Errorf("count wrong: %d duplicates; %d lease takeover(s) without release allow at most %d (one batch of %d each)", c.Duplicates, t, bound, f.opts.BatchSize)
	}
	return nil
}

// fleetSink counts deliveries like countSink and records, per partition,
// the first delivery of an entry appended after the cut (see cutAt).
type fleetSink struct {
	tr         *tracker
	partitions int
	appendedAt []atomic.Int64 // by message: unix ns before its transaction began
	cutAt      atomic.Int64   // unix ns; 0 before the cut
	firstAfter []atomic.Int64 // by partition: unix ns
}

func newFleetSink(tr *tracker, partitions int) *fleetSink {
	return &fleetSink{tr: tr, partitions: partitions, appendedAt: make([]atomic.Int64, tr.n), firstAfter: make([]atomic.Int64, partitions)}
}

func (fs *fleetSink) Publish(_ context.Context, msgs []outbox.Entry) []error {
	now := time.Now().UnixNano()
	cut := fs.cutAt.Load()
	for i := range msgs {
		fs.tr.markOrdered(msgs[i].Key, msgs[i].Payload)
		if cut == 0 {
			continue
		}
		seq, _, err := parsePayload(msgs[i].Payload)
		if err != nil || seq < 0 || seq >= len(fs.appendedAt) || fs.appendedAt[seq].Load() <= cut {
			continue
		}
		fs.firstAfter[outbox.PartitionOf(msgs[i].Key, fs.partitions)].CompareAndSwap(0, now)
	}
	return make([]error, len(msgs))
}

// arrivals appends msgs in order at perSec from one caller (so each key's
// order is its message order), every 10 ms in one transaction what has
// come due, recording each message's time into at before its transaction.
// stop ends it after the transaction in flight (never by cancelling one: a
// commit cancelled in flight may still have committed) and returns how
// many messages were appended.
func arrivals(ctx context.Context, in *instance, msgs *messages, perSec float64, at []atomic.Int64) (stop func() (int, error)) {
	quit := make(chan struct{})
	done := make(chan struct{})
	var next int
	var err error
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				err = ctx.Err()
				return
			case <-tick.C:
			}
			due := min(int(time.Since(start).Seconds()*perSec), len(msgs.keys))
			if due <= next {
				continue
			}
			now := time.Now().UnixNano()
			for i := next; i < due; i++ {
				at[i].Store(now)
			}
			if err = in.append(ctx, msgs.entries(next, due)); err != nil {
				return
			}
			next = due
		}
	}()
	var once sync.Once
	return func() (int, error) {
		once.Do(func() { close(quit) })
		<-done
		return next, err
	}
}

// w5fleet runs the fleet workloads on one backend.
func (s *Suite) w5fleet(ctx context.Context, t target) error {
	return errors.Join(s.fleetSpreadAndCut(ctx, t), s.fleetRate(ctx, t), s.fleetFetches(ctx, t))
}

// fleetSpreadAndCut starts 20 relays on 100 partitions, waits until they
// converge (the spread), then, with entries arriving at fleetArrivals on
// every partition, cuts one relay off from the store and measures the time
// until each partition it held delivers an entry appended after the cut.
func (s *Suite) fleetSpreadAndCut(ctx context.Context, t target) error {
	lo, hi := s.sr(t.key+".fleet.spread.min"), s.sr(t.key+".fleet.spread.max")
	held, conv, rec := s.sr(t.key+".fleet.held"), s.sr(t.key+".fleet.converge"), s.sr(t.key+".fleet.recovery")
	for run := range s.thisRun() {
		err := func() error {
			in, err := t.open(ctx, fleetPartitions)
			if err != nil {
				return err
			}
			defer in.close()
			// Enough messages for the longest run: a second before the
			// cut, the longest wait for the recovery, a second after.
			msgs := newMessages(int(fleetArrivals*(fleetWait+3*time.Second).Seconds()), 11)
			tr := newTracker(len(msgs.keys))
			sink := newFleetSink(tr, fleetPartitions)
			f, err := newFleet(in.store, sink, fleetRelays, false, func(o *outbox.RelayOptions) { o.LeaseTTL = fleetTTL })
			if err != nil {
				return err
			}
			start := time.Now()
			if err := f.start(ctx); err != nil {
				return err
			}
			defer f.stop(s)
			sp, allHeld, converged, err := f.waitConverged(ctx, fleetPartitions, start)
			if err != nil {
				return err
			}
			lo.add(float64(sp.lo), nil)
			hi.add(float64(sp.hi), nil)
			held.add(ms(allHeld), nil)
			conv.add(ms(converged), nil)

			stopArrivals := arrivals(ctx, in, msgs, fleetArrivals, sink.appendedAt)
			defer stopArrivals()
			// The relays started together, so their heartbeats keep
			// step; a crash comes at any point of that cycle, so the cut
			// comes at a random one (a cut just after a heartbeat is the
			// worst case: its record then lives a whole LeaseTTL).
			if !sleep(ctx, time.Second+rand.N(fleetTTL/3)) {
				return ctx.Err()
			}
			// Cut off the relay in the middle of the owner order.
			victim := fleetRelays / 2
			parts := f.ledger.heldBy(f.relays[victim].Owner())
			if len(parts) == 0 {
				return fmt.Errorf("relay %s holds no partition to take over", f.relays[victim].Owner())
			}
			cutAt := time.Now()
			sink.cutAt.Store(cutAt.UnixNano())
			f.nodes[victim].cut.Store(true)
			recovery, err := waitFirstAfter(ctx, sink, parts, cutAt)
			if err != nil {
				return err
			}
			if !sleep(ctx, time.Second) {
				return ctx.Err()
			}
			k, err := stopArrivals()
			if err != nil {
				return fmt.Errorf("appending: %w", err)
			}
			werr := tr.waitN(ctx, k, 30*time.Second)
			c := tr.counts_()
			c.Expected = k
			if werr == nil {
				werr = f.check(c)
			}
			f.stop(s)
			if werr == nil {
				werr = in.expectPending(ctx, 0)
			}
			rec.add(ms(recovery), &c)
			s.logf("   fleet: cut %s off holding partitions %v; all delivering again after %s; %d appended, %d duplicates, %d takeovers without release",
				f.relays[victim].Owner(), parts, recovery.Round(time.Millisecond), k, c.Duplicates, f.ledger.takeoverCount())
			return werr
		}()
		if err != nil {
			s.fail("outbox/%s W5 fleet spread and cut run %d: %v", t.name, run+1, err)
		}
	}
	w := fmt.Sprintf("%s, %d relays on %d partitions", t.title, fleetRelays, fleetPartitions)
	sys := "outbox/" + t.name + " relays"
	settings := fmt.Sprintf("LeaseTTL %s, AcquireInterval %s", fleetTTL, fleetTTL/3)
	s.record("ours."+t.key+".fleet.spread.min", w+", converged", sys+", fewest partitions per relay", "partitions", true, lo, "")
	s.record("ours."+t.key+".fleet.spread.max", w+", converged", sys+", most partitions per relay", "partitions", false, hi, "")
	s.record("ours."+t.key+".fleet.held", w+", converged", sys+", Start to every partition held", "ms", false, held, settings)
	s.record("ours."+t.key+".fleet.converge", w+", converged", sys+", Start to every relay at its share", "ms", false, conv, "")
	s.record("ours."+t.key+".fleet.recovery", w+", one relay cut off", sys+", cut to its partitions delivering again", "ms", false, rec,
		fmt.Sprintf("%s; %d entries/s arriving; counts over the whole run", settings, fleetArrivals))
	return nil
}

// waitFirstAfter waits until each of parts delivered an entry appended
// after cutAt, and returns the time from cutAt to the last of them.
func waitFirstAfter(ctx context.Context, sink *fleetSink, parts []int, cutAt time.Time) (time.Duration, error) {
	deadline := cutAt.Add(fleetWait)
	for {
		var last int64
		waiting := 0
		for _, p := range parts {
			v := sink.firstAfter[p].Load()
			if v == 0 {
				waiting++
			}
			last = max(last, v)
		}
		if waiting == 0 {
			return time.Duration(last - cutAt.UnixNano()), nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of the %d partitions of the cut-off relay delivered nothing appended after the cut within %s", waiting, len(parts), fleetWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// fleetRate drains one backlog on 100 partitions with 1 relay and with 20:
// once with the relays converged before the backlog is filled (their
// fetches held back by the gate meanwhile; timed from opening the gate),
// and once from a cold start on the filled backlog (timed from the first
// Start, convergence included).
func (s *Suite) fleetRate(ctx context.Context, t target) error {
	n := s.cfg.N
	msgs := newMessages(n, 10)
	for _, relays := range []int{1, fleetRelays} {
		warm, cold := s.sr(fmt.Sprintf("%s.fleet.rate.%d", t.key, relays)), s.sr(fmt.Sprintf("%s.fleet.cold.%d", t.key, relays))
		for run := range s.thisRun() {
			for _, gated := range []bool{true, false} {
				el, c, err := s.fleetDrain(ctx, t, msgs, relays, gated)
				if err != nil {
					s.fail("outbox/%s W5 fleet drain, %d relay(s), converged %v, run %d: %v", t.name, relays, gated, run+1, err)
					continue
				}
				if gated {
					warm.add(rate(n, el), &c)
				} else {
					cold.add(rate(n, el), &c)
				}
			}
		}
		w := fmt.Sprintf("%s drain, %s backlog on %d partitions", t.title, human(n), fleetPartitions)
		sys := fmt.Sprintf("outbox/%s, %d relays", t.name, relays)
		if relays == 1 {
			sys = "outbox/" + t.name + ", 1 relay"
		}
		s.record(fmt.Sprintf("ours.%s.fleet.rate.%d", t.key, relays), w, sys+", converged", "entries/s", true, warm, "from opening the gate on the filled backlog")
		s.record(fmt.Sprintf("ours.%s.fleet.cold.%d", t.key, relays), w, sys+", cold start", "entries/s", true, cold, "from the first Start, convergence included")
	}
	return nil
}

// fleetDrain drains msgs from a fresh outbox on 100 partitions with a fleet
// of relays and returns the drain time and the counts. gated: the fleet
// converges first, then the backlog is filled, and the time runs from
// opening the gate; else the time runs from the first Start on the filled
// backlog.
func (s *Suite) fleetDrain(ctx context.Context, t target, msgs *messages, relays int, gated bool) (time.Duration, Counts, error) {
	in, err := t.open(ctx, fleetPartitions)
	if err != nil {
		return 0, Counts{}, err
	}
	defer in.close()
	tr := newTracker(len(msgs.keys))
	f, err := newFleet(in.store, countSink{tr}, relays, gated, func(o *outbox.RelayOptions) { o.LeaseTTL = fleetTTL })
	if err != nil {
		return 0, Counts{}, err
	}
	defer f.stop(s)
	var start time.Time
	if gated {
		if err := f.start(ctx); err != nil {
			return 0, Counts{}, err
		}
		if _, _, _, err := f.waitConverged(ctx, fleetPartitions, time.Now()); err != nil {
			return 0, Counts{}, err
		}
		if _, err := in.fill(ctx, msgs, 1000); err != nil {
			return 0, Counts{}, err
		}
		start = time.Now()
		f.openGate()
	} else {
		if _, err := in.fill(ctx, msgs, 1000); err != nil {
			return 0, Counts{}, err
		}
		start = time.Now()
		if err := f.start(ctx); err != nil {
			return 0, Counts{}, err
		}
	}
	werr := tr.wait(ctx, drainTimeout(tr.n))
	el := time.Since(start)
	c := tr.counts_()
	if werr == nil {
		werr = f.check(c)
	}
	f.stop(s)
	if werr == nil {
		werr = in.expectPending(ctx, 0)
	}
	return el, c, werr
}

// fetchLeaseTTL is the LeaseTTL of fleetFetches: short enough that every
// lease renews during the window.
const fetchLeaseTTL = 1500 * time.Millisecond

// fleetFetches counts the FindPendingBatch calls of 4 converged relays on
// 64 partitions while entries are appended one per transaction at 100/s,
// with wake-ups, polling set far beyond the window and leases that renew
// during it (LeaseTTL 1.5s: each is renewed about every second): every
// fetch in it is one a notification caused, a renewal causing none.
func (s *Suite) fleetFetches(ctx context.Context, t target) error {
	n := 200
	if s.cfg.Quick {
		n = 100
	}
	per := s.sr(t.key + ".fleet.fetches")
	for run := range s.thisRun() {
		err := func() error {
			in, err := t.open(ctx, fetchPartitions)
			if err != nil {
				return err
			}
			defer in.close()
			msgs := newMessages(n, 12)
			tr := newTracker(n)
			f, err := newFleet(in.store, countSink{tr}, fetchRelays, false, func(o *outbox.RelayOptions) {
				o.PollInterval = time.Hour
				o.LeaseTTL = fetchLeaseTTL
				o.AcquireInterval = 200 * time.Millisecond
			})
			if err != nil {
				return err
			}
			if err := f.start(ctx); err != nil {
				return err
			}
			defer f.stop(s)
			if _, _, _, err := f.waitConverged(ctx, fetchPartitions, time.Now()); err != nil {
				return err
			}
			// A worker fetches once when it gets its lease: wait until
			// that is over.
			if err := waitQuiet(ctx, f.fetches, 300*time.Millisecond); err != nil {
				return err
			}
			before := f.fetches()
			start := time.Now()
			for i := range n {
				if d := time.Until(start.Add(time.Duration(i) * time.Second / fetchRate)); d > 0 && !sleep(ctx, d) {
					return ctx.Err()
				}
				if err := in.append(ctx, msgs.entries(i, i+1)); err != nil {
					return err
				}
			}
			werr := tr.wait(ctx, 30*time.Second)
			// Count the fetches a late or repeated notification causes too.
			if werr == nil {
				werr = waitQuiet(ctx, f.fetches, 300*time.Millisecond)
			}
			fetched := f.fetches() - before
			c := tr.counts_()
			if werr == nil {
				werr = f.check(c)
			}
			per.add(float64(fetched)/float64(n), &c)
			s.logf("   fleet: %d fetches for %d appends", fetched, n)
			return werr
		}()
		if err != nil {
			s.fail("outbox/%s W5 fleet fetches run %d: %v", t.name, run+1, err)
		}
	}
	w := fmt.Sprintf("%s, %d relays on %d partitions, %d appends/s", t.title, fetchRelays, fetchPartitions, fetchRate)
	s.record("ours."+t.key+".fleet.fetches", w, "outbox/"+t.name+" relays, FindPendingBatch calls per append", "fetches/append", false, per,
		fmt.Sprintf("%d appends, 1 per tx, wake-ups; PollInterval 1h, LeaseTTL %s (renewed during the window)", n, fetchLeaseTTL))
	return nil
}

// waitQuiet waits until count has not changed for quiet.
func waitQuiet(ctx context.Context, count func() int64, quiet time.Duration) error {
	last, since := count(), time.Now()
	deadline := since.Add(fleetWait)
	for time.Since(since) < quiet {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the relays kept fetching for %s with nothing appended", fleetWait)
		}
		time.Sleep(10 * time.Millisecond)
		if v := count(); v != last {
			last, since = v, time.Now()
		}
	}
	return nil
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
