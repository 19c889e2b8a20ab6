package pginbox

import (
	"cmp"
	"slices"

	"github.com/outboxrelay/outbox/inbox"
)

// The argument preparation and answer mapping both stores share: the
// stores differ only in how they send arrays (pgx: Go slices; database/sql:
// array literals) and how they run statements.

// recordAnswer turns the 1-based positions Record's statement returned
// into one answer per ID.
func recordAnswer(n int, positions []int64) []bool {
	fresh := make([]bool, n)
	for _, p := range positions {
		if p >= 1 && int(p) <= n {
			fresh[p-1] = true
		}
	}
	return fresh
}

// sortedSeqs splits seqs into keys in byte order (the lock order) and
// their numbers.
func sortedSeqs(seqs map[string]int64) ([]string, []int64) {
	keys := make([]string, 0, len(seqs))
	for k := range seqs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make([]int64, len(keys))
	for i, k := range keys {
		vals[i] = seqs[k]
	}
	return keys, vals
}

// offsetColumns are SaveOffsets' arguments: one element per partition,
// the last Next given for a partition winning, sorted by (group, topic,
// partition), the primary key's order, so concurrent savers lock rows in
// one order.
type offsetColumns struct {
	groups, topics []string
	parts          []int32
	nexts          []int64
}

func newOffsetColumns(offsets []inbox.Offset) offsetColumns {
	last := map[[2]string]map[int32]int64{}
	var uniq []inbox.Offset
	for _, o := range offsets {
		gt := [2]string{o.Group, o.Topic}
		if last[gt] == nil {
			last[gt] = map[int32]int64{}
		}
		if _, seen := last[gt][o.Partition]; !seen {
			uniq = append(uniq, o)
		}
		last[gt][o.Partition] = o.Next
	}
	slices.SortFunc(uniq, func(a, b inbox.Offset) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	c := offsetColumns{
		groups: make([]string, len(uniq)),
		topics: make([]string, len(uniq)),
		parts:  make([]int32, len(uniq)),
		nexts:  make([]int64, len(uniq)),
	}
	for i, o := range uniq {
		c.groups[i], c.topics[i], c.parts[i] = o.Group, o.Topic, o.Partition
		c.nexts[i] = last[[2]string{o.Group, o.Topic}][o.Partition]
	}
	return c
}
