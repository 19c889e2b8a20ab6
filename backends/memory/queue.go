package memory

import (
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
)

// state is where an item is.
type state uint8

const (
	stateReady   state = iota // pending, in the partition's heap
	stateHeld                 // pending, set aside behind a failing entry of its key
	stateClaimed              // pending, claimed by the partition's lease
	stateParked               // parked
)

// item is one stored entry. It is owned by the Backend and guarded by its
// mutex.
type item struct {
	e     outbox.Entry // deep copy; Attempts, LastError, CreatedAt kept current
	seq   int64        // append sequence, global commit order
	due   time.Time    // next attempt time
	state state
	index int // position in the heap while stateReady
	// history is the entry's last attempts (outbox.MaxAttemptHistory at
	// most), oldest first; nil until its first attempt. Requeue keeps it.
	history []outbox.Attempt
	// deferred is set by a Failure.Deferred and cleared by an attempt, a
	// park or a requeue: while set, the entry is in its partition's
	// failing set (it holds back its key) whatever its Attempts.
	deferred bool
	// parkedAt is when the entry was parked (the backend's clock), while
	// it is parked; [Backend.PurgeParked] removes by it.
	parkedAt time.Time
}

// info returns the entry as [outbox.Looker] reports it, a copy owned by the
// caller.
func (it *item) info() outbox.EntryInfo {
	info := outbox.EntryInfo{Entry: it.e.Clone(), Parked: it.state == stateParked, History: slices.Clone(it.history)}
	if !info.Parked {
		info.DueAt = it.due
		info.Deferred = it.deferred
	}
	return info
}

// addAttempt appends a to the entry's history, dropping the oldest attempt
// when the history already holds outbox.MaxAttemptHistory.
func (it *item) addAttempt(a outbox.Attempt) {
	if len(it.history) < outbox.MaxAttemptHistory {
		it.history = append(it.history, a)
		return
	}
	copy(it.history, it.history[1:])
	it.history[len(it.history)-1] = a
}

// less orders items by next attempt time, then append order.
func less(a, b *item) bool {
	if !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	return a.seq < b.seq
}

// readyHeap is a binary min-heap of items ordered by less. It implements
// the operations itself (rather than container/heap) to keep item.index
// current without interface conversions.
type readyHeap []*item

func (h *readyHeap) push(it *item) {
	it.index = len(*h)
	*h = append(*h, it)
	h.up(it.index)
}

// pop removes and returns the smallest item. The heap must not be empty.
func (h *readyHeap) pop() *item {
	return h.remove(0)
}

// remove removes the item at index i and returns it.
func (h *readyHeap) remove(i int) *item {
	old := *h
	n := len(old) - 1
	it := old[i]
	if i != n {
		h.swap(i, n)
	}
	old[n] = nil
	*h = old[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	it.index = -1
	return it
}

func (h readyHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h readyHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !less(h[j], h[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts the item at i0 down and reports whether it moved.
func (h readyHeap) down(i0 int) bool {
	i := i0
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && less(h[r], h[l]) {
			j = r
		}
		if !less(h[j], h[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// countDue returns how many items are due at now and the earliest next
// attempt time among them. It visits only due items and their direct
// children: a subtree whose root is not due holds no due item.
func (h readyHeap) countDue(now time.Time) (n int64, oldest time.Time) {
	if len(h) == 0 || h[0].due.After(now) {
		return 0, time.Time{}
	}
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(h) || h[i].due.After(now) {
			continue
		}
		n++
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return n, h[0].due
}
