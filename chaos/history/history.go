package history

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// Entry is one append as the appender saw it.
type Entry struct {
	// ID is the outbox entry ID; retries of an append keep it.
	ID string
	// Key is the entry's key. Empty means no order is checked.
	Key string
	// Seq is the appender's per-key sequence number (1, 2, 3, ... in
	// commit order). Zero means no order is checked.
	Seq int64
	// Partition is the partition the entry should land on, nil if unknown.
	// It is informational (shown for lost entries).
	Partition *int32
	// At is when the commit returned; optional.
	At time.Time
}

// Delivery is one record the broker holds, as the consumer read it.
type Delivery struct {
	Topic     string
	Partition int32
	Offset    int64
	// ID is the outbox entry ID carried by the record.
	ID string
	// Key is the record key (informational; the appended key is used for
	// order checks).
	Key string
	// At is the time the record was read or its produce timestamp; it is
	// used for recovery times and for attributing duplicates to faults.
	At time.Time
}

// Fault is one fault the harness injected.
type Fault struct {
	At   time.Time
	What string
}

type entry struct {
	Entry
	unknown   bool // outcome unknown, never confirmed
	delivered bool
}

// History is an in-memory history. The zero value is empty and ready to
// use; its methods are safe for concurrent use. It keeps no slice or
// pointer it is given beyond the values copied in.
type History struct {
	mu         sync.Mutex
	entries    []entry
	byID       map[string]int
	deliveries []Delivery
	faults     []Fault
}

// Append records an entry whose commit returned success. A later Append
// of the same ID is ignored; an earlier Unknown of it is confirmed.
func (h *History) Append(e Entry) { h.add(e, false) }

// Unknown records an entry whose commit outcome is unknown. It is ignored
// if the ID was already recorded.
func (h *History) Unknown(e Entry) { h.add(e, true) }

func (h *History) add(e Entry, unknown bool) {
	if e.Partition != nil {
		p := *e.Partition
		e.Partition = &p
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byID == nil {
		h.byID = make(map[string]int)
	}
	if i, ok := h.byID[e.ID]; ok {
		if !unknown && h.entries[i].unknown {
			h.entries[i] = entry{Entry: e}
		}
		return
	}
	h.byID[e.ID] = len(h.entries)
	h.entries = append(h.entries, entry{Entry: e, unknown: unknown})
}

// Delivered records a record the broker holds. Deliveries may be recorded
// in any order; Check orders each partition by offset.
func (h *History) Delivered(d Delivery) {
	h.mu.Lock()
	h.deliveries = append(h.deliveries, d)
	h.mu.Unlock()
}

// Fault records a fault injected at the given time.
func (h *History) Fault(at time.Time, what string) {
	h.mu.Lock()
	h.faults = append(h.faults, Fault{At: at, What: what})
	h.mu.Unlock()
}

// Check compares what was appended with what was delivered. It does not
// change the history and may be called again after more is recorded.
func (h *History) Check() Report {
	h.mu.Lock()
	defer h.mu.Unlock()

	var r Report
	for i := range h.entries {
		if h.entries[i].unknown {
			r.Unknown++
		} else {
			r.Appended++
		}
	}

	// Each partition in offset order.
	ds := slices.Clone(h.deliveries)
	slices.SortStableFunc(ds, func(a, b Delivery) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})

	faults := slices.Clone(h.faults)
	slices.SortStableFunc(faults, func(a, b Fault) int { return a.At.Compare(b.At) })
	r.Faults = make([]FaultReport, len(faults))
	for i, f := range faults {
		r.Faults[i].Fault = f
	}

	type keyState struct {
		maxSeq int64
		maxID  string
		tp     topicPartition
	}
	keys := make(map[string]*keyState)
	delivered := make([]bool, len(h.entries))
	unexpected := make(map[string]bool)
	parts := make(map[string][]time.Time) // recovery streams, see stream

	for i, d := range ds {
		if i > 0 && ds[i-1].Topic == d.Topic && ds[i-1].Partition == d.Partition && ds[i-1].Offset == d.Offset {
			r.Rereads++
			continue
		}
		r.Delivered++
		tp := topicPartition{d.Topic, d.Partition}
		idx, known := h.byID[d.ID]
		s := tp.String()
		if known && h.entries[idx].Partition != nil {
			s = fmt.Sprintf("outbox partition %d", *h.entries[idx].Partition)
		}
		parts[s] = append(parts[s], d.At)

		if !known {
			if unexpected[d.ID] {
				h.duplicate(&r, faults, d)
				continue
			}
			unexpected[d.ID] = true
			r.Unexpected = append(r.Unexpected, d)
			continue
		}
		if delivered[idx] {
			h.duplicate(&r, faults, d)
			continue
		}
		delivered[idx] = true
		e := &h.entries[idx]
		if e.unknown {
			r.UnknownDelivered++
		}
		if e.Key == "" || e.Seq == 0 {
			continue
		}
		ks := keys[e.Key]
		if ks == nil {
			keys[e.Key] = &keyState{maxSeq: e.Seq, maxID: e.ID, tp: tp}
			continue
		}
		switch {
		case ks.tp != tp:
			r.OrderViolations = append(r.OrderViolations, OrderViolation{
				Key: e.Key, ID: e.ID, Seq: e.Seq, After: ks.maxSeq, AfterID: ks.maxID, Delivery: d,
				Reason: fmt.Sprintf("key first delivered on %s, now on %s", ks.tp, tp),
			})
		case e.Seq < ks.maxSeq:
			r.OrderViolations = append(r.OrderViolations, OrderViolation{
				Key: e.Key, ID: e.ID, Seq: e.Seq, After: ks.maxSeq, AfterID: ks.maxID, Delivery: d,
				Reason: fmt.Sprintf("seq %d delivered after seq %d", e.Seq, ks.maxSeq),
			})
		default:
			ks.maxSeq, ks.maxID = e.Seq, e.ID
		}
	}

	for i := range h.entries {
		if !delivered[i] && !h.entries[i].unknown {
			e := h.entries[i].Entry
			r.Lost = append(r.Lost, e)
			// The nearest fault at or before the commit, when it is known.
			j := sort.Search(len(faults), func(k int) bool { return faults[k].At.After(e.At) }) - 1
			if e.At.IsZero() || j < 0 {
				r.LostBeforeFaults++
			} else {
				r.Faults[j].Lost++
			}
		}
	}
	r.recovery(faults, parts)
	return r
}

func (h *History) duplicate(r *Report, faults []Fault, d Delivery) {
	r.Duplicates++
	// The nearest fault at or before d.At.
	i := sort.Search(len(faults), func(i int) bool { return faults[i].At.After(d.At) }) - 1
	if i < 0 {
		r.DuplicatesBeforeFaults++
		return
	}
	r.Faults[i].Duplicates++
}

type topicPartition struct {
	topic     string
	partition int32
}

func (tp topicPartition) String() string { return fmt.Sprintf("%s/%d", tp.topic, tp.partition) }

// recovery fills in each fault's recovery time and the quantiles.
func (r *Report) recovery(faults []Fault, parts map[string][]time.Time) {
	if len(faults) == 0 {
		return
	}
	var end time.Time
	for _, ts := range parts {
		slices.SortFunc(ts, time.Time.Compare)
		if t := ts[len(ts)-1]; t.After(end) {
			end = t
		}
	}
	for i, f := range faults {
		t := f.At
		winEnd := end
		if i+1 < len(faults) && faults[i+1].At.Before(end) {
			winEnd = faults[i+1].At
		}
		var worst time.Duration
		per := make(map[string]time.Duration, len(parts))
		for name, ts := range parts {
			// Only partitions that were delivering before the fault.
			j := sort.Search(len(ts), func(k int) bool { return ts[k].After(t) })
			if j == 0 {
				continue
			}
			var own time.Duration
			for ; j < len(ts) && ts[j-1].Before(winEnd); j++ {
				own = max(own, earlier(ts[j], winEnd).Sub(later(ts[j-1], t)))
			}
			// Nothing delivered after the last one until the window's end.
			if j == len(ts) && ts[j-1].Before(winEnd) {
				own = max(own, winEnd.Sub(later(ts[j-1], t)))
			}
			per[name] = own
			worst = max(worst, own)
		}
		r.Faults[i].Recovery = worst
		r.Faults[i].Partitions = per
	}
	ds := make([]time.Duration, len(r.Faults))
	for i := range r.Faults {
		ds[i] = r.Faults[i].Recovery
	}
	slices.Sort(ds)
	r.RecoveryP50 = quantile(ds, 0.5)
	r.RecoveryP90 = quantile(ds, 0.9)
	r.RecoveryMax = ds[len(ds)-1]
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// quantile is the nearest-rank quantile of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}
