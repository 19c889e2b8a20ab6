// Package exactlyonce checks a consumer's effects against what the
// appenders committed: every committed outbox entry applied exactly once
// (none missing, none twice), each key's entries applied in their append
// order, and nothing applied that nobody appended.
//
// An effect is one row the consumer wrote in its own database in the
// transaction that handled a message: the entry's ID, key and per-key
// sequence number (as the record carried it), the consumer's process ID,
// and N, the row's position in insertion order (a bigserial). Insertion
// order is the order the rows were written, which for two effects of one
// key is the order their transactions applied them as long as the
// consumer serializes a key's transactions (the inbox does, by its per-key
// sequence row).
//
// # What counts
//
//   - missing: a committed entry with no effect (an entry whose commit
//     outcome stayed unknown is never missing: it may not have committed);
//   - duplicates: effects of an ID beyond its first;
//   - order violations: a first effect of a key's entry whose append
//     sequence number is not above that of every earlier first effect of
//     the key (duplicates are counted as duplicates, not again here);
//   - unexpected: effects of an ID nobody appended;
//   - sequence mismatches: an effect whose recorded sequence number (the
//     record's outbox-key-seq header) is set and differs from the
//     appender's number for that ID.
//
// The check fails on any of them ([Report.OK]). It also counts the
// effects of numbered entries that recorded no number (Unnumbered): not a
// failure of exactly once, but a sign that the producer did not number
// the keys, which a caller that expects numbers checks.
package exactlyonce

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Entry is one entry an appender appended.
type Entry struct {
	ID  string
	Key string
	// Seq is the entry's number among its key's entries in commit order
	// (1, 2, 3, ...); 0 means its order is not checked.
	Seq int64
	// Unknown: the commit's outcome stayed unknown. Such an entry may be
	// applied (at most once) or not.
	Unknown bool
}

// Effect is one effect row a consumer wrote.
type Effect struct {
	// N orders the effects: their insertion order.
	N   int64
	ID  string
	Key string
	// Seq is the sequence number the consumed record carried, 0 if none.
	Seq int64
	// PID is the consumer process that wrote it (informational).
	PID int
}

// Violation is a first effect that broke its key's append order.
type Violation struct {
	Key string
	// ID and Seq are the entry applied out of order, N its effect.
	ID  string
	Seq int64
	N   int64
	// After and AfterID are the highest Seq of the key applied before it.
	After   int64
	AfterID string
}

func (v Violation) String() string {
	return fmt.Sprintf("key %q: seq %d (id %s, effect %d) applied after seq %d (id %s)", v.Key, v.Seq, v.ID, v.N, v.After, v.AfterID)
}

// Report is the verdict of [Check].
type Report struct {
	// Entries counts the committed entries, Unknown those whose outcome
	// stayed unknown, UnknownApplied those of them that were applied.
	Entries, Unknown, UnknownApplied int
	// Effects counts the effect rows; Applied the committed entries with
	// at least one.
	Effects, Applied int
	// Missing holds the committed entries without an effect, in the order
	// given.
	Missing []Entry
	// Duplicates counts effects of an ID beyond its first; DuplicateIDs
	// the IDs with more than one effect.
	Duplicates, DuplicateIDs int
	// OrderViolations holds, in effect order, the first effects that broke
	// their key's append order.
	OrderViolations []Violation
	// Unexpected holds the first effect of each ID nobody appended.
	Unexpected []Effect
	// SeqMismatches counts effects whose recorded Seq differs from the
	// appender's.
	SeqMismatches int
	// Unnumbered counts effects that recorded no Seq though their entry
	// has one.
	Unnumbered int
	// ByPID counts the effects each consumer process wrote.
	ByPID map[int]int
}

// OK reports whether every committed entry was applied exactly once, in
// its key's order, and nothing else was applied.
func (r Report) OK() bool {
	return len(r.Missing) == 0 && r.Duplicates == 0 && len(r.OrderViolations) == 0 &&
		len(r.Unexpected) == 0 && r.SeqMismatches == 0
}

// Check compares effects with entries. It does not keep or change either
// slice (it sorts a copy of effects by N). An entry ID given twice counts
// once, as committed if either says so.
func Check(entries []Entry, effects []Effect) Report {
	r := Report{ByPID: map[int]int{}}
	byID := make(map[string]Entry, len(entries))
	var order []string
	for _, e := range entries {
		if old, ok := byID[e.ID]; ok {
			if old.Unknown && !e.Unknown {
				byID[e.ID] = e
			}
			continue
		}
		byID[e.ID] = e
		order = append(order, e.ID)
	}
	effs := slices.Clone(effects)
	slices.SortStableFunc(effs, func(a, b Effect) int { return cmp.Compare(a.N, b.N) })
	r.Effects = len(effs)

	applied := map[string]int{}
	type last struct {
		seq int64
		id  string
	}
	lastOf := map[string]last{}
	for _, f := range effs {
		r.ByPID[f.PID]++
		applied[f.ID]++
		e, known := byID[f.ID]
		if !known {
			if applied[f.ID] == 1 {
				r.Unexpected = append(r.Unexpected, f)
			}
			continue
		}
		switch {
		case e.Seq != 0 && f.Seq == 0:
			r.Unnumbered++
		case f.Seq != 0 && e.Seq != 0 && f.Seq != e.Seq:
			r.SeqMismatches++
		}
		if applied[f.ID] > 1 {
			r.Duplicates++
			if applied[f.ID] == 2 {
				r.DuplicateIDs++
			}
			continue
		}
		if e.Key == "" || e.Seq == 0 {
			continue
		}
		l, seen := lastOf[e.Key]
		if seen && e.Seq <= l.seq {
			r.OrderViolations = append(r.OrderViolations, Violation{Key: e.Key, ID: e.ID, Seq: e.Seq, N: f.N, After: l.seq, AfterID: l.id})
			continue
		}
		lastOf[e.Key] = last{seq: e.Seq, id: e.ID}
	}
	for _, id := range order {
		e := byID[id]
		switch {
		case e.Unknown:
			r.Unknown++
			if applied[id] > 0 {
				r.UnknownApplied++
			}
		case applied[id] > 0:
			r.Entries++
			r.Applied++
		default:
			r.Entries++
			r.Missing = append(r.Missing, e)
		}
	}
	return r
}

// String is a one-line summary followed, when the report is not OK, by up
// to five examples of each defect.
func (r Report) String() string {
	var b strings.Builder
	verdict := "exactly once"
	if !r.OK() {
		verdict = "NOT exactly once"
	}
	fmt.Fprintf(&b, "%s: entries %d (+%d unknown, %d of them applied), effects %d, missing %d, duplicates %d (of %d entries), order violations %d, unexpected %d, seq mismatches %d, unnumbered %d, consumer processes %d",
		verdict, r.Entries, r.Unknown, r.UnknownApplied, r.Effects, len(r.Missing), r.Duplicates, r.DuplicateIDs,
		len(r.OrderViolations), len(r.Unexpected), r.SeqMismatches, r.Unnumbered, len(r.ByPID))
	const n = 5
	for _, e := range r.Missing[:min(n, len(r.Missing))] {
		fmt.Fprintf(&b, "\n  missing: id %s key %q seq %d", e.ID, e.Key, e.Seq)
	}
	for _, v := range r.OrderViolations[:min(n, len(r.OrderViolations))] {
		fmt.Fprintf(&b, "\n  order: %s", v)
	}
	for _, f := range r.Unexpected[:min(n, len(r.Unexpected))] {
		fmt.Fprintf(&b, "\n  unexpected: id %s key %q (effect %d, pid %d)", f.ID, f.Key, f.N, f.PID)
	}
	return b.String()
}
