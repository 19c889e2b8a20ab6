package redisoutbox

import (
	"sync"

	"github.com/outboxrelay/outbox"
)

// The front hint (claim.lua, "The front hint"; docs/redis.md, "Fetching
// ahead") needs one invariant of every script: a script that puts a
// member into pending or moves one within it changes the partition's
// sequence counter (the generation), so a hint read before it no longer
// holds. The writers, each with the same note next to its write: append.lua
// and append_keyseq.lua, requeue.lua and import.lua take sequences from
// the counter (an import into a held partition from the block hold_part.lua
// took from it); mark_failed.lua, cancel.lua and claim.lua (re-scoring
// held-back entries) bump it with bump_gen or INCR; acquire.lua's restore
// runs only for a new lease, whose hints are new. Scripts that only remove
// members (mark_sent.lua, quarantine.lua, remove_exported.lua, the claim's
// parks) need no bump: the hint's rank checks see a removal.

// codeHintRefused is claim.lua's result when a front hint sent without the
// entries in flight did not hold.
const codeHintRefused = -4

// frontSlot holds a partition's front hints: what claim.lua needs to
// start a FetchNext behind the entries in flight instead of reading them
// again, and mark_sent.lua to remove a batch that is the front of pending
// by rank (see "The front hint" in claim.lua). The last two fetches under
// one lease set them (the relay marks a batch sent after it fetched the
// next one ahead). A FetchNext whose entries in flight are exactly the
// last fetch's result sends its hint; a MarkSent of exactly one of the
// two results sends that one's.
//
// The entries in flight (or the pending members MarkSent would otherwise
// send) go along only after a hint did not hold, until a FetchNext's hint
// holds again: while nothing but the relay writes the partition (a
// backlog draining) the hints hold every time, and the calls carry no
// list; while appends come in, each bumps the generation, the hints fail,
// and the lists go with every call, in one round trip (a hint sent alone
// that fails costs a second one, once).
type frontSlot struct {
	mu      sync.Mutex
	owner   string // the lease the hints were claimed under
	version int64
	cur     frontHint // the last fetch's
	prev    frontHint // the fetch before it, under the same lease
	// refused: the last hint sent did not hold.
	refused bool
}

// frontHint describes the result of one fetch; gen is "" for none.
type frontHint struct {
	gen   string // the sequence counter as the claim read it
	first string // ID and pending member of the first entry returned
	fm    string
	last  string // and of the last
	lm    string
	n     int
	// lscore: the pending score of the last entry returned, as the claim
	// read it
	lscore string
	byID   map[string]string // the pending member of every entry returned
}

// held records whether the last hint sent held.
func (f *frontSlot) held(ok bool) {
	f.mu.Lock()
	f.refused = !ok
	f.mu.Unlock()
}

// remember records the result of a fetch under lease: gen and lscore as
// claim.lua returned them, the entries returned and their pending members
// by ID (the map is kept, not copied: the caller no longer changes it).
func (f *frontSlot) remember(lease outbox.Lease, gen, lscore string, entries []outbox.Entry, members map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner == lease.Owner && f.version == lease.Version {
		f.prev = f.cur
	} else {
		f.prev = frontHint{}
	}
	f.owner, f.version, f.cur = lease.Owner, lease.Version, frontHint{}
	if gen == "" || len(entries) == 0 || len(members) != len(entries) {
		return
	}
	first, last := entries[0].ID, entries[len(entries)-1].ID
	f.cur = frontHint{gen: gen, first: first, fm: members[first], last: last, lm: members[last], n: len(entries), lscore: lscore, byID: members}
}

// hintArgs is the front hint as claim.lua takes it (ARGV gen, first,
// last, count, lscore); gen is "" for none.
type hintArgs struct {
	gen, first, last string
	count            int
	lscore           string
}

// hint returns the front hint for a FetchNext under lease with inFlight:
// the hint when inFlight is what the last fetch returned under lease, else
// none (an empty generation); and whether to send it without the entries
// in flight (the last hint sent held).
func (f *frontSlot) hint(lease outbox.Lease, inFlight []outbox.Entry) (h hintArgs, alone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &f.cur
	if c.gen == "" || f.owner != lease.Owner || f.version != lease.Version || len(inFlight) != c.n || inFlight[0].ID != c.first || inFlight[len(inFlight)-1].ID != c.last {
		return hintArgs{}, false
	}
	return hintArgs{gen: c.gen, first: c.fm, last: c.lm, count: c.n, lscore: c.lscore}, !f.refused
}

// markHint returns mark_sent.lua's ARGV[3..5] (generation, first and last
// member) when ids are exactly the entries one of the last two fetches
// under lease returned, in any order, and the last hint sent held; else
// nil.
func (f *frontSlot) markHint(lease outbox.Lease, ids []string) []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused || f.owner != lease.Owner || f.version != lease.Version {
		return nil
	}
	for _, h := range []*frontHint{&f.cur, &f.prev} {
		if h.gen == "" || len(ids) != h.n {
			continue
		}
		seen := make(map[string]bool, len(ids))
		all := true
		for _, id := range ids {
			if _, ok := h.byID[id]; !ok || seen[id] {
				all = false
				break
			}
			seen[id] = true
		}
		if all {
			return []any{h.gen, h.fm, h.lm}
		}
	}
	return nil
}
