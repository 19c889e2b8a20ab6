package outbox

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// coordinator decides which partitions the relay holds. It runs once per
// relay (not per partition), so the lease traffic of a fleet grows with
// the number of relays, not with relays × partitions.
//
// With [Membership] (and no explicit RelayOptions.Partitions), every
// AcquireInterval it records a heartbeat listing the partitions the relay
// holds and reads the live members back; every relay computes the same
// shares from that list ([shares]) and moves toward its own: it asks its
// workers to acquire partitions no live member reports holding, or hands
// its surplus over (a worker gives its partition up after its batch in
// flight). Without Membership it asks every worker that holds nothing to
// acquire, every AcquireInterval, as relays always did.
//
// With a [Pauser] store it also reads the store's pauses at start and
// every PollInterval (see pauses).
type coordinator struct {
	owner         string
	maxPartitions int
	leaseTTL      time.Duration
	interval      time.Duration // AcquireInterval
	pollInterval  time.Duration
	now           func() time.Time
	log           *slog.Logger
	// self is the relay's heartbeat record but for Partitions: Owner,
	// MaxPartitions, Host, Version, and Started (set when run starts).
	self Member
	// pauses are the store's pauses as last read; workers read them.
	pauses pauses
	// workers are the workers of the partitions the relay serves, in
	// partition order. The coordinator talks to them only through their
	// methods (ask, handOver, holds, wanted, starving).
	workers []*worker
	// members is the store's Membership, nil when the relay does not
	// balance.
	members Membership
	// kick (buffer of one) asks for a pass before the next interval: a
	// lease was gained, given up or lost, or a slot was freed.
	kick chan struct{}
	// heldElsewhere is set when an acquire found the partition leased by
	// someone else; with Membership that means a partition no live member
	// reports, whose lease has not expired yet, so the next pass comes
	// sooner.
	heldElsewhere atomic.Bool
	// tried holds the partitions asked for since the last timer pass (with
	// Membership). Only the coordinator's goroutine touches it.
	tried map[int]bool

	target, seen atomic.Int64 // for RelayStats
	overCap      bool         // the last pass set a target above MaxPartitions
}

// init sets the coordinator up for the workers of a relay over store with
// the options o (defaults applied); explicit reports whether
// RelayOptions.Partitions was set.
func (c *coordinator) init(store Store, o RelayOptions, log *slog.Logger, workers []*worker, explicit bool) {
	c.owner, c.maxPartitions = o.Owner, o.MaxPartitions
	c.leaseTTL, c.interval = o.LeaseTTL, o.AcquireInterval
	c.pollInterval, c.now = o.PollInterval, o.Now
	c.log, c.workers = log, workers
	host, _ := os.Hostname()
	c.self = Member{Owner: o.Owner, MaxPartitions: o.MaxPartitions, Host: host, Version: o.Version}
	c.pauses.init(store, log, c.wake)
	c.kick = make(chan struct{}, 1)
	c.tried = make(map[int]bool)
	m, ok := store.(Membership)
	switch {
	case explicit:
		log.Info("outbox relay: RelayOptions.Partitions is set, so this relay does not share partitions with others: it takes every listed partition it can lease")
	case !ok:
		msg := "outbox relay: the store does not implement outbox.Membership, so relays cannot balance partitions: each takes every partition it can lease"
		if o.MaxPartitions > 0 {
			log.Warn(msg+"; with MaxPartitions, partitions can stay unowned when relays leave unless the remaining relays have free slots", "max_partitions", o.MaxPartitions)
		} else {
			log.Info(msg)
		}
	default:
		c.members = m
	}
	n := len(workers)
	if c.members == nil && o.MaxPartitions > 0 {
		n = min(n, o.MaxPartitions)
	}
	c.target.Store(int64(n))
}

// balancing reports whether the relay shares partitions through the
// store's Membership.
func (c *coordinator) balancing() bool { return c.members != nil }

// targetCount is the number of partitions the relay aims to hold
// (RelayStats.PartitionsTarget).
func (c *coordinator) targetCount() int64 { return c.target.Load() }

// membersSeen is the number of live relays at the last heartbeat
// (RelayStats.Members).
func (c *coordinator) membersSeen() int64 { return c.seen.Load() }

// poke asks for a pass soon. It never blocks.
func (c *coordinator) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// attempted records the outcome of a failed acquire.
func (c *coordinator) attempted(heldElsewhere bool) {
	if heldElsewhere {
		c.heldElsewhere.Store(true)
	}
	c.poke()
}

func (c *coordinator) run(ctx, hardCtx context.Context) {
	c.self.Started = c.now()
	interval := c.interval
	timer := time.NewTimer(0)
	defer timer.Stop()
	var poll <-chan time.Time
	if c.pauses.enabled() {
		c.pauses.read(ctx)
		t := time.NewTicker(c.pollInterval)
		defer t.Stop()
		poll = t.C
	}
	for {
		byTimer := false
		select {
		case <-ctx.Done():
			return
		case <-poll:
			c.pauses.read(ctx)
			continue
		case <-timer.C:
			byTimer = true
		case <-c.kick:
		}
		if c.members == nil {
			c.pass(byTimer)
			if byTimer {
				timer.Reset(interval)
			}
			continue
		}
		if byTimer {
			c.heldElsewhere.Store(false)
			clear(c.tried)
		}
		ok, expiry := c.balance(hardCtx)
		// Every pass is a heartbeat, so the next one is due an interval
		// later; sooner after a failure, when an orphaned partition's lease
		// is about to expire, or just after another relay's record expires
		// (a relay that died: its partitions are taken at once, not up to
		// an interval later).
		next := interval
		if !ok || c.heldElsewhere.Load() {
			next = max(interval/4, 10*time.Millisecond)
		}
		if expiry > 0 {
			next = min(next, expiry+10*time.Millisecond)
		}
		timer.Reset(next)
	}
}

// pass asks every worker that holds nothing to acquire (no Membership).
// After a kick only workers that found no free slot are asked, so a worker
// asks the store at most once per AcquireInterval.
func (c *coordinator) pass(byTimer bool) {
	for _, w := range c.workers {
		if w.holds() || w.wanted() || (!byTimer && !w.starving()) {
			continue
		}
		w.ask()
	}
}

// balance records the heartbeat and moves the relay's holdings toward its
// share. It reports whether the heartbeat succeeded and how long until the
// first other member's record expires (0 if none). A partition is
// asked for at most once per AcquireInterval (between timer passes), so a
// failed acquire that triggers the next pass does not ask again at once.
func (c *coordinator) balance(ctx context.Context) (ok bool, expiry time.Duration) {
	members, idx, ok := c.heartbeat(ctx)
	if !ok {
		return false, 0
	}
	expiry = firstExpiry(members, idx, c.leaseTTL)
	target := shares(members, len(c.workers))[idx]
	c.setTarget(target, len(members))

	order := preference(c.workers, idx, len(members))
	var held, joining []*worker // held and still wanted; being acquired
	for _, w := range order {
		switch {
		case w.holds() && w.wanted():
			held = append(held, w)
		case !w.holds() && w.wanted():
			joining = append(joining, w)
		}
	}
	if surplus := len(held) - target; surplus > 0 {
		// Hand over the least preferred first; each worker lets go after
		// its batch in flight.
		for _, w := range held[len(held)-surplus:] {
			w.handOver()
		}
		return true, expiry
	}
	if need := target - len(held) - len(joining); need > 0 {
		c.askFor(order, need, takenByOthers(members, idx))
	}
	return true, expiry
}

// heartbeat records the relay's heartbeat, listing the partitions it
// holds, and returns the live members, sorted by owner, with the index of
// this relay among them; ok is false when the heartbeat failed.
func (c *coordinator) heartbeat(ctx context.Context) (members []Member, idx int, ok bool) {
	me := c.self
	for _, w := range c.workers {
		if w.holds() {
			me.Partitions = append(me.Partitions, w.partition)
		}
	}
	members, err := c.members.Heartbeat(ctx, me, c.leaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("outbox relay: recording the relay's heartbeat failed; keeping the partitions it holds", "err", err)
		}
		return nil, 0, false
	}
	idx = slices.IndexFunc(members, func(m Member) bool { return m.Owner == me.Owner })
	if idx < 0 { // a store that lost the record as it wrote it: count us anyway
		members = append(members, me)
		slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Owner, b.Owner) })
		idx = slices.IndexFunc(members, func(m Member) bool { return m.Owner == me.Owner })
	}
	return members, idx, true
}

// firstExpiry is how long until the first record of another member than
// members[idx] expires (0 if none), judged by the store's clock: the
// store's now is our record's expiry less the TTL, never the relay's clock.
func firstExpiry(members []Member, idx int, ttl time.Duration) (expiry time.Duration) {
	storeNow := members[idx].Expires.Add(-ttl)
	for i, m := range members {
		if i != idx && !members[idx].Expires.IsZero() {
			if d := m.Expires.Sub(storeNow); d > 0 && (expiry == 0 || d < expiry) {
				expiry = d
			}
		}
	}
	return expiry
}

// setTarget records the relay's share and the fleet's size for RelayStats,
// and warns once when the share is above MaxPartitions.
func (c *coordinator) setTarget(target, relays int) {
	c.target.Store(int64(target))
	c.seen.Store(int64(relays))
	if cap := c.maxPartitions; cap > 0 && target > cap {
		if !c.overCap {
			c.log.Warn("outbox relay: holding more partitions than MaxPartitions: the live relays' caps do not cover every partition, and no partition is left without a holder",
				"target", target, "max_partitions", cap, "relays", relays, "partitions", len(c.workers))
		}
		c.overCap = true
	} else {
		c.overCap = false
	}
}

// takenByOthers is the set of partitions the members other than
// members[idx] report holding.
func takenByOthers(members []Member, idx int) map[int]bool {
	taken := make(map[int]bool)
	for i, m := range members {
		if i == idx {
			continue
		}
		for _, p := range m.Partitions {
			taken[p] = true
		}
	}
	return taken
}

// askFor asks up to need workers, in order, to acquire their partitions:
// those that neither hold nor are acquiring theirs, were not asked since
// the last timer pass, and whose partition no other member holds.
func (c *coordinator) askFor(order []*worker, need int, taken map[int]bool) {
	for _, w := range order {
		if need == 0 {
			break
		}
		if w.holds() || w.wanted() || c.tried[w.partition] || taken[w.partition] {
			continue
		}
		c.tried[w.partition] = true
		w.ask()
		need--
	}
}

// leave deletes the relay's heartbeat record after its workers stopped.
func (c *coordinator) leave(ctx context.Context) {
	if c.members == nil {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCallTimeout)
	defer cancel()
	if err := c.members.Leave(lctx, c.owner); err != nil {
		c.log.Warn("outbox relay: deleting the relay's heartbeat record failed; it expires after LeaseTTL", "err", err)
	}
}

// shares computes how many of n partitions each member (sorted by owner)
// should hold: an even split, the first members in owner order taking one
// more when n does not divide evenly, lowered to each member's
// MaxPartitions with what that frees spread over the members with room.
// What the caps cannot cover is spread over all members: no partition is
// left without a holder while any relay is alive. Every relay computes the
// same result from the same member list.
func shares(members []Member, n int) []int {
	out := make([]int, len(members))
	if len(members) == 0 {
		return out
	}
	active := make([]int, len(members))
	for i := range active {
		active[i] = i
	}
	left := n
	for left > 0 && len(active) > 0 {
		base, extra := left/len(active), left%len(active)
		next := active[:0:0]
		given := 0
		for j, i := range active {
			want := base
			if j < extra {
				want++
			}
			if c := members[i].MaxPartitions; c > 0 {
				want = min(want, c-out[i])
			}
			out[i] += want
			given += want
			if c := members[i].MaxPartitions; c == 0 || out[i] < c {
				next = append(next, i)
			}
		}
		left -= given
		active = next
		if given == 0 {
			break
		}
	}
	if left > 0 { // the caps do not cover every partition
		base, extra := left/len(members), left%len(members)
		for i := range out {
			out[i] += base
			if i < extra {
				out[i]++
			}
		}
	}
	return out
}

// preference orders the served partitions for the member at idx of k: its
// "natural" slice first (the idx-th of k equal slices), then the others,
// starting after that slice. Relays starting together so try different
// partitions first, and hand over the partitions outside their slice
// first.
func preference(served []*worker, idx, k int) []*worker {
	n := len(served)
	lo, hi := idx*n/k, (idx+1)*n/k
	out := make([]*worker, 0, n)
	out = append(out, served[lo:hi]...)
	out = append(out, served[hi:]...)
	return append(out, served[:lo]...)
}

// wake wakes the worker of partition p, or every worker for
// [AllPartitions].
func (c *coordinator) wake(p int) {
	for _, w := range c.workers {
		if p == AllPartitions || w.partition == p {
			w.wakeUp()
		}
	}
}

// signal sends on a channel with a buffer of one without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
