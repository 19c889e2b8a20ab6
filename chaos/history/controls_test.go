package history

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// synthetic is a generated run: n entries over keys spread on partitions,
// each partition's stream in commit order, one delivery per ms.
type synthetic struct {
	entries []Entry
	streams [][]string // per partition, entry IDs in delivery order
}

func generate(seed uint64, n, keys, partitions int) synthetic {
	rng := rand.New(rand.NewPCG(seed, 0))
	s := synthetic{streams: make([][]string, partitions)}
	seq := make([]int64, keys)
	for i := range n {
		k := rng.IntN(keys)
		seq[k]++
		p := int32(k % partitions)
		e := Entry{ID: fmt.Sprintf("e%07d", i), Key: fmt.Sprintf("k%04d", k), Seq: seq[k], Partition: &p}
		s.entries = append(s.entries, e)
		s.streams[p] = append(s.streams[p], e.ID)
	}
	return s
}

func (s synthetic) history() *History {
	h := new(History)
	for _, e := range s.entries {
		h.Append(e)
	}
	for p, ids := range s.streams {
		for off, id := range ids {
			h.Delivered(Delivery{Topic: "t", Partition: int32(p), Offset: int64(off), ID: id, At: ms(off)})
		}
	}
	return h
}

const (
	genEntries    = 100_000
	genKeys       = 1000
	genPartitions = 8
)

func TestSyntheticCleanRunPasses(t *testing.T) {
	t.Parallel()
	r := generate(1, genEntries, genKeys, genPartitions).history().Check()
	if !r.OK() || r.Appended != genEntries || r.Delivered != genEntries || r.Duplicates != 0 {
		t.Fatalf("clean synthetic run: %v", r)
	}
}

// A relay run unordered: within each key, the entries swap places in the
// stream (the key's slots stay, who fills them is shuffled). The checker
// must report order violations.
func TestNegativeControlUnorderedRelay(t *testing.T) {
	t.Parallel()
	s := generate(2, genEntries, genKeys, genPartitions)
	rng := rand.New(rand.NewPCG(3, 0))
	key := make(map[string]string, len(s.entries))
	for _, e := range s.entries {
		key[e.ID] = e.Key
	}
	for _, ids := range s.streams {
		slots := make(map[string][]int)
		for i, id := range ids {
			slots[key[id]] = append(slots[key[id]], i)
		}
		for _, idx := range slots {
			perm := rng.Perm(len(idx))
			orig := make([]string, len(idx))
			for j, i := range idx {
				orig[j] = ids[i]
			}
			for j, i := range idx {
				ids[i] = orig[perm[j]]
			}
		}
	}
	r := s.history().Check()
	if r.OK() || len(r.OrderViolations) == 0 {
		t.Fatalf("unordered relay not caught: %v", r)
	}
	if len(r.Lost) != 0 || len(r.Unexpected) != 0 || r.Duplicates != 0 {
		t.Errorf("a shuffle loses nothing and adds nothing: %v", r)
	}
	// With ~100 entries per key, nearly every key is out of order.
	if len(r.OrderViolations) < genEntries/10 {
		t.Errorf("only %d order violations in a shuffled run of %d entries", len(r.OrderViolations), genEntries)
	}
	t.Logf("%v", r)
}

// A sink that drops 0.1% of records. The checker must report exactly the
// dropped entries as lost, and nothing else.
func TestNegativeControlLossySink(t *testing.T) {
	t.Parallel()
	s := generate(4, genEntries, genKeys, genPartitions)
	rng := rand.New(rand.NewPCG(5, 0))
	dropped := make(map[string]bool)
	for p, ids := range s.streams {
		kept := ids[:0]
		for _, id := range ids {
			if rng.IntN(1000) == 0 {
				dropped[id] = true
				continue
			}
			kept = append(kept, id)
		}
		s.streams[p] = kept
	}
	if len(dropped) == 0 {
		t.Fatal("the generator dropped nothing")
	}
	r := s.history().Check()
	if r.OK() || len(r.Lost) != len(dropped) {
		t.Fatalf("dropped %d, report: %v", len(dropped), r)
	}
	for _, e := range r.Lost {
		if !dropped[e.ID] {
			t.Errorf("%s reported lost but was delivered", e.ID)
		}
	}
	if len(r.OrderViolations) != 0 || len(r.Unexpected) != 0 {
		t.Errorf("a drop is not disorder: %v", r)
	}
	t.Logf("%v", r)
}

// A faulty but correct run: every 10,000 deliveries a fault makes the
// relay re-publish its last batch of up to 50, and 0.5% of appends have an
// unknown outcome, half of them never committed (never delivered). The
// checker must pass it and bound duplicates per fault by the batch.
func TestSyntheticFaultyRunPasses(t *testing.T) {
	t.Parallel()
	const batch = 50
	s := generate(6, genEntries, genKeys, 1)
	rng := rand.New(rand.NewPCG(7, 0))
	h := new(History)
	skip := make(map[string]bool)
	for _, e := range s.entries {
		switch rng.IntN(400) {
		case 0:
			h.Unknown(e) // committed after all
		case 1:
			h.Unknown(e) // never committed
			skip[e.ID] = true
		default:
			h.Append(e)
		}
	}
	var off int64
	at := t0
	deliver := func(id string) {
		h.Delivered(Delivery{Topic: "t", Partition: 0, Offset: off, ID: id, At: at})
		off++
		at = at.Add(time.Millisecond)
	}
	var stream []string
	for _, id := range s.streams[0] {
		if !skip[id] {
			stream = append(stream, id)
		}
	}
	faults := 0
	for i, id := range stream {
		deliver(id)
		if i > 0 && i%10_000 == 0 {
			h.Fault(at, "relay killed")
			faults++
			at = at.Add(time.Second) // the lease expires
			for _, again := range stream[max(0, i+1-batch) : i+1] {
				deliver(again)
			}
		}
	}
	r := h.Check()
	if !r.OK() || r.Duplicates != faults*batch || r.MaxDuplicatesPerFault() != batch {
		t.Fatalf("want OK with %d duplicates, %d per fault: %v", faults*batch, batch, r)
	}
	if r.RecoveryMax != time.Second || r.RecoveryP50 != time.Second {
		t.Errorf("recovery p50/max = %v/%v, want 1s", r.RecoveryP50, r.RecoveryMax)
	}
}

func BenchmarkCheck(b *testing.B) {
	h := generate(8, genEntries, genKeys, genPartitions).history()
	b.ReportAllocs()
	for b.Loop() {
		h.Check()
	}
}
