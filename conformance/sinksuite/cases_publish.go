package sinksuite

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/outboxrelay/outbox"
)

func publishCases() []testCase {
	return []testCase{
		{"Publish", "RoundTrip", publishRoundTrip},
		{"Publish", "NilMeansReadable", publishNilMeansReadable},
		{"Publish", "OneErrorPerEntry", publishOneErrorPerEntry},
		{"Publish", "EmptyInput", publishEmptyInput},
		{"Publish", "InputNotRetained", publishInputNotRetained},
		{"Publish", "Concurrent", publishConcurrent},
	}
}

// publishRoundTrip: every entry comes back with its ID, key, payload
// (binary, empty, 256 KiB) and headers (traceparent, the key-sequence
// header, a header of the suite's own, unicode), exactly once.
func publishRoundTrip(t *testing.T, s *env) {
	keyed := s.keyed(s.prefix+"-key-é✓", 3)
	unkeyed := s.entry("", 0)
	empty := s.entry(s.prefix+"-empty", 1)
	empty.Payload = nil
	big := s.entry(s.prefix+"-big", 1)
	big.Payload = bytes.Repeat([]byte{0, 1, 2, 0xfe, 0xff, 'x'}, 256<<10/6)
	keyed[1].Headers["x-sinksuite-unicode"] = "é✓ ok"
	entries := append(keyed, unkeyed, empty, big)
	s.publishOK(t, entries)
	msgs := s.expectReadable(t, entries, nil)
	expectOnce(t, msgs, entries)
	expectKeyOrder(t, msgs, entries)
}

// publishNilMeansReadable: a nil error means the broker holds the
// message; 200 entries over 20 keys in one call, then 50 single-entry
// calls.
func publishNilMeansReadable(t *testing.T, s *env) {
	var keys [][]outbox.Entry
	for k := range 20 {
		keys = append(keys, s.keyed(fmt.Sprintf("%s-k%d", s.prefix, k), 10))
	}
	entries := interleave(keys)
	s.publishOK(t, entries)
	singles := s.distinct(50)
	for _, e := range singles {
		s.publishOK(t, []outbox.Entry{e})
	}
	all := append(entries, singles...)
	msgs := s.expectReadable(t, all, nil)
	expectOnce(t, msgs, all)
}

// publishOneErrorPerEntry: Publish returns exactly one error per entry
// for calls of 1, 2, 7 and 64 entries, each nil when it succeeded.
func publishOneErrorPerEntry(t *testing.T, s *env) {
	var all []outbox.Entry
	for _, n := range []int{1, 2, 7, 64} {
		entries := s.distinct(n)
		s.publishOK(t, entries) // checks len(errs) == n
		all = append(all, entries...)
	}
	s.expectReadable(t, all, nil)
}

// publishEmptyInput: Publish of nil and of an empty slice returns no
// error and writes nothing.
func publishEmptyInput(t *testing.T, s *env) {
	for _, in := range [][]outbox.Entry{nil, {}} {
		errs, panicked := s.tryPublish(s.ctx, in)
		if panicked != nil {
			t.Fatalf("Publish(%#v) panicked: %v", in, panicked)
		}
		if len(errs) != 0 {
			t.Errorf("Publish(%#v) returned %d errors (%v); want none", in, len(errs), errs)
		}
	}
	if msgs := s.read(t, 1, absentWait); len(msgs) != 0 {
		t.Errorf("Publish of no entries wrote %d messages: %+v", len(msgs), msgs[0])
	}
}

// publishInputNotRetained: Publish must not keep the entries it is given:
// changing the payload's bytes and the headers after it returned changes
// nothing on the broker.
func publishInputNotRetained(t *testing.T, s *env) {
	entries := s.distinct(5)
	orig := cloneAll(entries)
	s.publishOK(t, entries)
	for i := range entries {
		for j := range entries[i].Payload {
			entries[i].Payload[j] = '#'
		}
		entries[i].Headers["traceparent"] = "changed after Publish returned"
		entries[i].Headers["x-sinksuite-added"] = "added after Publish returned"
	}
	msgs := s.expectReadable(t, orig, nil)
	for _, m := range msgs {
		if _, ok := m.Headers["x-sinksuite-added"]; ok {
			t.Errorf("message %s carries a header added after Publish returned", m.ID)
		}
	}
}

// publishConcurrent: 8 goroutines publish at once (distinct keys, as the
// relay's partitions do); every entry is published once, each key in
// order.
func publishConcurrent(t *testing.T, s *env) {
	all := s.concurrently(t, 8, 5, func(w, c int) []outbox.Entry {
		key := fmt.Sprintf("%s-w%d", s.prefix, w)
		return []outbox.Entry{s.entry(key, 2*c+1), s.entry(key, 2*c+2), s.entry("", 0)}
	})
	msgs := s.expectReadable(t, all, nil)
	expectOnce(t, msgs, all)
	expectKeyOrder(t, msgs, all)
}
