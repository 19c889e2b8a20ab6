package demo

import (
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/outboxrelay/outbox"
)

// demoTx is one planned transaction: entries[first:first+n].
type demoTx struct {
	first, n int
	rollback bool
}

// demoEntry is one planned entry.
type demoEntry struct {
	id  string
	key string
	// seq numbers the committed entries of a key in commit order (-1 for
	// entries of rolled-back transactions).
	seq      int
	rollback bool
	// poison entries are refused permanently by the broker: parked.
	poison bool
	// failures counts the injected transient failures before the entry's
	// first successful publish; demoMaxAttempts means it never gets one and
	// is parked.
	failures int
}

// demoPlan is what a run will do, a pure function of the seed and the
// flags (only the entry IDs, UUIDv7, differ from run to run): the
// transactions, their keys, which roll back, which entries are poison, and
// which publish attempts fail (failsOnPurpose). Concurrency decides only
// the interleaving, so every count the demo prints is the plan's.
type demoPlan struct {
	seed     uint64
	failRate float64
	entries  []demoEntry
	txs      []demoTx
	byID     map[string]int

	committed, committedTxs   int // entries and transactions that commit
	rolledBack, rolledBackTxs int // and that roll back
	keys                      int // distinct keys of committed entries
	poison                    int // committed poison entries
	failures                  int // injected transient failures in all
	exhausted                 int // entries parked after demoMaxAttempts failures
}

func planDemo(c *DemoCmd) *demoPlan {
	rng := rand.New(rand.NewPCG(c.Seed, 0x6f7574626f78)) // consumed in one fixed order below
	p := &demoPlan{seed: c.Seed, failRate: c.FailRate, byID: map[string]int{}}
	nextSeq := map[string]int{}
	var committed []int
	for p.committed < c.Entries {
		n := 1 + rng.IntN(8)
		tx := demoTx{first: len(p.entries), rollback: rng.Float64() < c.Rollback}
		if !tx.rollback {
			n = min(n, c.Entries-p.committed)
		}
		tx.n = n
		for range n {
			e := demoEntry{id: outbox.NewID(), key: "order-" + strconv.Itoa(rng.IntN(c.Keys)), seq: -1, rollback: tx.rollback}
			if !tx.rollback {
				e.seq = nextSeq[e.key]
				nextSeq[e.key]++
				committed = append(committed, len(p.entries))
			}
			p.byID[e.id] = len(p.entries)
			p.entries = append(p.entries, e)
		}
		p.txs = append(p.txs, tx)
		if tx.rollback {
			p.rolledBack, p.rolledBackTxs = p.rolledBack+n, p.rolledBackTxs+1
		} else {
			p.committed, p.committedTxs = p.committed+n, p.committedTxs+1
		}
	}
	p.keys = len(nextSeq)
	// Poison: c.Poison distinct committed entries (a partial shuffle).
	for i := range c.Poison {
		j := i + rng.IntN(len(committed)-i)
		committed[i], committed[j] = committed[j], committed[i]
		p.entries[committed[i]].poison = true
	}
	p.poison = c.Poison
	for i := range p.entries {
		e := &p.entries[i]
		if e.rollback || e.poison {
			continue
		}
		for e.failures < demoMaxAttempts && p.failsOnPurpose(i, e.failures) {
			e.failures++
		}
		p.failures += e.failures
		if e.failures == demoMaxAttempts {
			p.exhausted++
		}
	}
	return p
}

// failsOnPurpose reports whether the publish attempt of entry (its index
// in the plan) that follows attempt earlier failures fails: a pure
// function of (seed, entry, attempt), so it does not matter which relay
// tries when, or how often an attempt is repeated.
func (p *demoPlan) failsOnPurpose(entry, attempt int) bool {
	h := splitmix(splitmix(splitmix(p.seed)^uint64(entry)) ^ uint64(attempt))
	return float64(h>>11)/(1<<53) < p.failRate
}

// splitmix is SplitMix64's output function, a bijective mixer.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// parked is the number of entries the plan parks; arrivals the number it
// delivers.
func (p *demoPlan) parked() int { return p.poison + p.exhausted }

func (p *demoPlan) arrivals() int { return p.committed - p.parked() }

func (p *demoPlan) describe(c *DemoCmd) string {
	s := fmt.Sprintf("%d entries in %d transactions over %d keys, and %d transactions (%d entries) that roll back; "+
		"%d poison entries; %.4g%% of publish attempts fail on purpose: %d failures",
		p.committed, p.committedTxs, p.keys, p.rolledBackTxs, p.rolledBack, p.poison, c.FailRate*100, p.failures)
	if p.exhausted > 0 {
		s += fmt.Sprintf(", so %d entries fail %d times and are parked", p.exhausted, demoMaxAttempts)
	}
	return s
}
