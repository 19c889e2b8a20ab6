package conformance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

func relayOperateCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Relay", name: "PausedTopicWaitsForResumeAcrossAFleet", partitions: 4, run: relayPausedTopicFleet[Tx]},
	}
}

// liveTopic is the topic relayPausedTopicFleet leaves running beside
// pausedTopic.
const liveTopic = "conformance-live"

// relayPausedTopicFleet pauses a topic while three relays run, then
// appends to it and to another topic: only the other topic is delivered
// (but for the entries of keys held back by a paused entry), no attempt is
// counted on the paused entries, and after the resume everything is
// delivered, in key order, nothing lost.
func relayPausedTopicFleet[Tx any](t *testing.T, s *env[Tx]) {
	pauser, ok := s.b.(outbox.Pauser)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Pauser", s.b)
	}
	rec := newRecorder(0)
	var relays []*outbox.Relay
	for i := range 3 {
		name := fmt.Sprintf("relay-%d", i+1)
		relays = append(relays, startRelay(t, s.ctx, s.b, rec.sink(name), relayOptions(name)))
	}
	stats := func() string {
		var out []string
		for _, r := range relays {
			out = append(out, fmt.Sprintf("%s %+v", r.Owner(), r.Stats()))
		}
		return "relays: " + strings.Join(out, "; ")
	}
	warm := entry("warm-up", "w")
	warm.Topic = liveTopic
	if err := s.appendRecorded(s.ctx, rec, false, warm); err != nil {
		t.Fatal(err)
	}
	rec.waitDone(t, s.ctx, stats)

	if err := pauser.PauseTopic(s.ctx, pausedTopic); err != nil {
		t.Fatalf("PauseTopic(%q): %v", pausedTopic, err)
	}
	paused, live, behind, all := pauseFleetEntries()
	for chunk := range slices.Chunk(all, 7) {
		if err := s.appendRecorded(s.ctx, rec, false, chunk...); err != nil {
			t.Fatal(err)
		}
	}

	// The live topic flows while the paused one waits.
	deadline := time.Now().Add(relayWait)
	for !rec.deliveredAll(live) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v the live topic's entries were not all delivered while the other topic is paused: missing %v; %s", relayWait, rec.undelivered(live), stats())
		}
		s.sleep(t, pollEvery)
	}
	// Ten poll intervals more: nothing of the paused topic, nor behind
	// it, reaches the sink.
	s.sleep(t, 10*relayOptions("").PollInterval)
	s.checkPausedUntouched(t, rec, paused, behind)
	if t.Failed() {
		t.FailNow()
	}

	if err := pauser.ResumeTopic(s.ctx, pausedTopic); err != nil {
		t.Fatalf("ResumeTopic(%q): %v", pausedTopic, err)
	}
	rec.waitDone(t, s.ctx, stats)
	for _, r := range relays {
		stopRelay(t, r)
	}
	dups := rec.check(t)
	t.Logf("%d entries of the live topic delivered while %d of the paused one (and %d behind them) waited, then all after the resume; %d duplicate deliveries; %s",
		len(live), len(paused), len(behind), dups, stats())
}

// pauseFleetEntries builds the entries of relayPausedTopicFleet: keys of
// one topic each, appended interleaved (paused and live), and keys whose
// first entry is of the paused topic and the next of the live one (behind:
// those wait behind it). all is every entry in append order.
func pauseFleetEntries() (paused, live, behind, all []outbox.Entry) {
	for i := range 6 {
		for k := range 4 {
			p := entry(fmt.Sprintf("p%d-%02d", k, i), fmt.Sprintf("pk%d", k))
			p.Topic = pausedTopic
			l := entry(fmt.Sprintf("l%d-%02d", k, i), fmt.Sprintf("lk%d", k))
			l.Topic = liveTopic
			paused, live, all = append(paused, p), append(live, l), append(all, p, l)
		}
		for k := range 3 {
			m := entry(fmt.Sprintf("m%d-%02d", k, i), fmt.Sprintf("mk%d", k))
			switch i {
			case 1:
				m.Topic = pausedTopic
				paused, all = append(paused, m), append(all, m)
			case 3:
				m.Topic = liveTopic
				behind, all = append(behind, m), append(all, m)
			}
		}
	}
	return paused, live, behind, all
}

// checkPausedUntouched fails the test if an entry of the paused topic, or
// behind one, reached the sink, or if a paused entry counts an attempt.
func (s *env[Tx]) checkPausedUntouched(t *testing.T, rec *recorder, paused, behind []outbox.Entry) {
	t.Helper()
	for _, e := range slices.Concat(paused, behind) {
		if n := rec.attemptsOf(e.ID); n != 0 {
			t.Errorf("%s (topic %s, key %s) was handed to the sink %d times while topic %q is paused", e.ID, e.Topic, e.Key, n, pausedTopic)
		}
	}
	if lk, ok := s.b.(outbox.Looker); ok {
		for _, e := range paused {
			info, err := lk.Lookup(s.ctx, e.ID)
			if err != nil {
				t.Fatalf("Lookup(%s): %v", e.ID, err)
			}
			if info.Attempts != 0 || info.LastError != "" || info.Parked {
				t.Errorf("Lookup(%s) while its topic is paused: Attempts %d, LastError %q, Parked %v; want a pending entry with no attempt", e.ID, info.Attempts, info.LastError, info.Parked)
			}
		}
	}
}

// deliveredAll reports whether every entry of es was delivered.
func (r *recorder) deliveredAll(es []outbox.Entry) bool {
	return len(r.undelivered(es)) == 0
}

// undelivered lists the IDs of the entries of es not delivered yet.
func (r *recorder) undelivered(es []outbox.Entry) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range es {
		if r.delivered[e.ID] == 0 {
			out = append(out, e.ID)
		}
	}
	return out
}

// attemptsOf is how many times the entry with id was handed to the sink.
func (r *recorder) attemptsOf(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[id]
}
