package app

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"
)

// operatorStore is what the operator commands' tests drive through the
// SPI: seeding, failing, heartbeating and leasing.
type operatorStore interface {
	outbox.Store
	outbox.Looker
	outbox.Membership
}

// jsonOf runs the CLI with args (and -o json) and decodes what it printed
// into v.
func jsonOf(t *testing.T, v any, args ...string) {
	t.Helper()
	out := cliOK(t, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("outbox %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// attempt claims the partition of id as owner, fails id with msg (due
// again after delay) and releases the rest of the batch.
func attempt(t *testing.T, s operatorStore, id, owner, msg string, delay time.Duration) {
	t.Helper()
	fail(t, s, owner, outbox.Failure{ID: id, Error: msg, Delay: delay})
}

// fail claims the partition of f.ID as owner, records f and releases the
// rest of the batch.
func fail(t *testing.T, s operatorStore, owner string, f outbox.Failure) {
	id := f.ID
	t.Helper()
	ctx := context.Background()
	info, err := s.Lookup(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := s.AcquireLease(ctx, info.Partition, owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := s.FindPendingBatch(ctx, lease, 100)
	if err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, e := range batch {
		if e.ID != id {
			rest = append(rest, e.ID)
		}
	}
	if len(rest) == len(batch) {
		t.Fatalf("%s was not fetched: %v", id, batch)
	}
	if err := s.MarkFailed(ctx, lease, []outbox.Failure{f}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, lease, rest); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
}

// The stuck key of exerciseOperators: s0 failed twice (by relay-1, then
// relay-2, due again in an hour), s1 and s2 wait behind it.
const (
	stuckErr1 = "kafka: broker not available: s0 attempt one"
	stuckErr2 = "kafka: NOT_LEADER_FOR_PARTITION: s0 attempt two"
)

// exerciseOperators runs the operator commands of issue 28 against an
// outbox seeded by clitest.SeedAdmin, named by flags; appendFn appends
// more entries.
func exerciseOperators(t *testing.T, s operatorStore, appendFn func(...outbox.Entry) error, flags ...string) {
	with := func(cmd string, rest ...string) []string {
		return append(append(strings.Fields(cmd), flags...), rest...)
	}
	if err := appendFn(
		outbox.Entry{ID: "s0", Topic: "shipments", Key: "ship-1"},
		outbox.Entry{ID: "s1", Topic: "shipments", Key: "ship-1"},
		outbox.Entry{ID: "s2", Topic: "shipments", Key: "ship-1"},
	); err != nil {
		t.Fatal(err)
	}
	attempt(t, s, "s0", "relay-1", stuckErr1, 0)
	attempt(t, s, "s0", "relay-2", stuckErr2, time.Hour)
	stuckPartition := outbox.PartitionOf("ship-1", s.Partitions())

	t.Run("StuckKeyFoundThroughStatusAndBlocked", func(t *testing.T) {
		stuckKeyInStatus(t, with, stuckPartition)
		stuckKeyInBlocked(t, with, stuckPartition)
	})
	t.Run("EntriesPerState", func(t *testing.T) { entriesPerState(t, with) })
	t.Run("ShowHistory", func(t *testing.T) { showHistory(t, with) })
	t.Run("PauseResume", func(t *testing.T) { pauseResume(t, with, s.Partitions()) })
	t.Run("Relays", func(t *testing.T) { relays(t, s, with) })
	t.Run("DeferredAndCancelledHeads", func(t *testing.T) { deferredAndCancelled(t, s, appendFn, with) })
}

// deferredAndCancelled: an entry an open breaker deferred blocks its key
// without an attempt, and shows so; cancelling a failing head unblocks
// its key.
func deferredAndCancelled(t *testing.T, s operatorStore, appendFn func(...outbox.Entry) error, with func(string, ...string) []string) {
	if err := appendFn(outbox.Entry{ID: "d0", Topic: "orders", Key: "defer-1"}, outbox.Entry{ID: "d1", Topic: "orders", Key: "defer-1"}); err != nil {
		t.Fatal(err)
	}
	fail(t, s, "relay-1", outbox.Failure{ID: "d0", Error: "not published: the circuit breaker is open", Delay: time.Hour, Deferred: true})

	// Two blocked keys, a page each: ship-1 since s0's first attempt,
	// defer-1 since d0 was appended, later.
	var b admincmd.BlockedJSON
	jsonOf(t, &b, with("blocked", "--limit", "1")...)
	if len(b.Blocked) != 1 || b.Blocked[0].Key != "ship-1" || b.NextAfter == nil {
		t.Fatalf("blocked --limit 1: %+v; want ship-1 and a next page", b)
	}
	if text := cliOK(t, with("blocked", "--limit", "1")...); !strings.Contains(text, "(more: --after "+cli.ShellQuote(*b.NextAfter)+")") {
		t.Errorf("blocked --limit 1 does not say how to get the next page (--after %s):\n%s", *b.NextAfter, text)
	}
	jsonOf(t, &b, with("blocked", "--limit", "1", "--after", *b.NextAfter)...)
	if len(b.Blocked) != 1 || b.Blocked[0].Key != "defer-1" || b.NextAfter != nil {
		t.Fatalf("blocked, page 2: %+v; want defer-1, the last page", b)
	}

	cliOK(t, with("cancel", "s0")...)
	b = admincmd.BlockedJSON{}
	jsonOf(t, &b, with("blocked")...)
	if len(b.Blocked) != 1 || b.Blocked[0].Key != "defer-1" || b.Blocked[0].Reason != "deferred" || b.Blocked[0].Head.ID != "d0" ||
		!b.Blocked[0].Head.Deferred || b.Blocked[0].Head.Attempts != 0 || b.Blocked[0].Waiting != 1 {
		t.Errorf("blocked after deferring d0 and cancelling s0: %+v; want only defer-1, deferred by d0, 1 waiting", b.Blocked)
	}
	if text := cliOK(t, with("blocked")...); !strings.Contains(text, "breaker open") || strings.Contains(text, "ship-1") {
		t.Errorf("blocked:\n%s", text)
	}
	if text := cliOK(t, with("entries", "--state", "scheduled")...); !strings.Contains(text, "d0") || !strings.Contains(text, "0 (deferred)") {
		t.Errorf("entries --state scheduled (d0 was deferred before any attempt):\n%s", text)
	}
	var j admincmd.ShowJSON
	jsonOf(t, &j, with("show", "d0")...)
	if !j.Deferred || len(j.History) != 0 || j.LastError != "" {
		t.Errorf("show d0 -o json: deferred %v, history %v, last error %q; want deferred, no attempt, no error", j.Deferred, j.History, j.LastError)
	}
	if text := cliOK(t, with("show", "d0")...); !strings.Contains(text, "deferred    yes (an open circuit breaker held it back without an attempt") {
		t.Errorf("show d0:\n%s", text)
	}
}

// textHas fails t for each of wants that text lacks; what names the
// command.
func textHas(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// stuckKeyInStatus: status counts the stuck key in its partition, and
// names each partition's oldest due entry.
func stuckKeyInStatus(t *testing.T, with func(string, ...string) []string, part int) {
	var st admincmd.StatusJSON
	jsonOf(t, &st, with("status")...)
	for _, p := range st.ByPartition {
		want := int64(0)
		if p.Partition == part {
			want = 1
		}
		if p.BlockedKeys == nil || *p.BlockedKeys != want {
			t.Errorf("status: partition %d blocked_keys %v; want %d", p.Partition, p.BlockedKeys, want)
		}
		if (p.OldestDueID != nil) != (p.Due > 0) {
			t.Errorf("status: partition %d has %d due and oldest_due_id %v", p.Partition, p.Due, p.OldestDueID)
		} else if p.OldestDueID != nil {
			checkOldestDue(t, with, p.Partition, *p.OldestDueID)
		}
	}
	textHas(t, "status", cliOK(t, with("status")...), "OLDEST DUE", "BLOCKED KEYS", "(1 key is blocked by a failing, deferred or paused head entry: `outbox blocked --")
}

// checkOldestDue: the entry status names as partition's oldest due is
// due, of that partition, and due no later than any due entry of it.
func checkOldestDue(t *testing.T, with func(string, ...string) []string, partition int, id string) {
	var oldest admincmd.ShowJSON
	jsonOf(t, &oldest, with("show", id)...)
	var due admincmd.EntriesJSON
	jsonOf(t, &due, with("entries", "--state", "due")...)
	for _, e := range due.Entries {
		if e.Partition == partition && e.DueAt.Before(*oldest.DueAt) {
			t.Errorf("status: partition %d's oldest due is %s (due %v), but %s is due earlier (%v)", partition, oldest.ID, oldest.DueAt, e.ID, e.DueAt)
		}
	}
	if oldest.Partition != partition || oldest.DueAt.After(time.Now()) {
		t.Errorf("status: partition %d's oldest due entry %s is of partition %d, due %v", partition, oldest.ID, oldest.Partition, oldest.DueAt)
	}
}

// stuckKeyInBlocked: blocked names the stuck key, its head, why, and how
// many wait behind it.
func stuckKeyInBlocked(t *testing.T, with func(string, ...string) []string, part int) {
	var b admincmd.BlockedJSON
	jsonOf(t, &b, with("blocked")...)
	if len(b.Blocked) != 1 || b.NextAfter != nil {
		t.Fatalf("blocked: %+v; want the one key ship-1", b)
	}
	k := b.Blocked[0]
	key := fmt.Sprint(k.Key, k.Topic, k.Partition, k.Reason, k.Waiting)
	head := fmt.Sprint(k.Head.ID, k.Head.Attempts, k.Head.LastError, len(k.Head.History))
	if want := fmt.Sprint("ship-1", "shipments", part, "failing", 2); key != want {
		t.Errorf("blocked: key, topic, partition, reason, waiting = %s; want %s", key, want)
	}
	if want := fmt.Sprint("s0", 2, stuckErr2, 2); head != want {
		t.Errorf("blocked: head ID, attempts, last error, history = %s; want %s", head, want)
	}
	if k.Head.DueAt == nil || k.Head.DueAt.Before(time.Now().Add(50*time.Minute)) || k.BlockedSeconds < 0 || len(k.Head.History) == 0 || !k.Since.Equal(k.Head.History[0].At) {
		t.Errorf("blocked: %+v; want the head due in an hour, blocked since its first attempt", k)
	}
	textHas(t, "blocked", cliOK(t, with("blocked")...), "KEY", "WAITING", "ship-1", "shipments", "s0", "failing", "NOT_LEADER_FOR_PARTITION", "(in ", "(`outbox show --", " HEAD` shows a head's attempts")
	if got := cliOK(t, with("blocked", "--topic", "orders")...); !strings.Contains(got, "no blocked keys whose head entry matches topic \"orders\"") {
		t.Errorf("blocked --topic orders:\n%s", got)
	}
	if got := cliOK(t, with("blocked", "--error", "not_leader")...); !strings.Contains(got, "ship-1") {
		t.Errorf("blocked --error not_leader (matched ignoring case):\n%s", got)
	}
}

func entriesPerState(t *testing.T, with func(string, ...string) []string) {
	ids := func(args ...string) ([]string, *string) {
		var e admincmd.EntriesJSON
		jsonOf(t, &e, with("entries", args...)...)
		out := []string{}
		for _, x := range e.Entries {
			out = append(out, x.ID)
		}
		return out, e.NextAfter
	}
	tests := []struct {
		args []string
		want []string
		next string
	}{
		// SeedAdmin: e0, e4 due; e5 scheduled; e1-e3 parked. s1, s2 are
		// due, held back by s0, which is retrying.
		{[]string{"--state", "due"}, []string{"e0", "e4", "s1", "s2"}, ""},
		{[]string{"--state", "due", "--limit", "2"}, []string{"e0", "e4"}, "e4"},
		{[]string{"--state", "due", "--limit", "2", "--after", "e4"}, []string{"s1", "s2"}, ""},
		{[]string{"--state", "DUE", "--topic", "shipments"}, []string{"s1", "s2"}, ""},
		{[]string{"--state", "scheduled"}, []string{"e5"}, ""},
		{[]string{"--state", "retrying"}, []string{"s0"}, ""},
		{[]string{"--state", "retrying", "--error", "NOT_LEADER"}, []string{"s0"}, ""},
		{[]string{"--state", "retrying", "--error", "attempt one"}, []string{}, ""},
		{[]string{"--state", "parked"}, []string{"e1", "e2", "e3"}, ""},
		{[]string{"--state", "parked", "--key", "k3"}, []string{"e3"}, ""},
		{[]string{"--state", "parked", "--until", "2000-01-01"}, []string{}, ""},
		{[]string{"--state", "parked", "--since", "1h"}, []string{"e1", "e2", "e3"}, ""},
	}
	for _, tc := range tests {
		got, next := ids(tc.args...)
		gotNext := ""
		if next != nil {
			gotNext = *next
		}
		if !slices.Equal(got, tc.want) || gotNext != tc.next {
			t.Errorf("entries %v: %v, next_after %q; want %v, %q", tc.args, got, gotNext, tc.want, tc.next)
		}
	}
	var parked admincmd.EntriesJSON
	jsonOf(t, &parked, with("entries", "--state", "parked")...)
	for _, e := range parked.Entries {
		if e.DueAt != nil || e.Attempts != 1 || e.LastError == "" {
			t.Errorf("entries --state parked: %s has due_at %v, attempts %d, last error %q; want null, 1, its error", e.ID, e.DueAt, e.Attempts, e.LastError)
		}
	}
	var r admincmd.EntriesJSON
	jsonOf(t, &r, with("entries", "--state", "retrying")...)
	if r.State != "retrying" || len(r.Entries) != 1 || len(r.Entries[0].History) != 2 || r.Entries[0].DueAt == nil || r.Entries[0].Attempts != 2 {
		t.Errorf("entries --state retrying: %+v; want s0 with its 2 attempts and due time", r)
	}
	text := cliOK(t, with("entries", "--state", "due", "--limit", "2")...)
	for _, w := range []string{"ID", "DUE", "LAST ERROR", "e0", "e4", "ago)", "(more: --after e4)"} {
		if !strings.Contains(text, w) {
			t.Errorf("entries --state due --limit 2 lacks %q:\n%s", w, text)
		}
	}
	if got := cliOK(t, with("entries", "--state", "scheduled", "--topic", "payments")...); !strings.Contains(got, `no scheduled entries match topic "payments" in `) {
		t.Errorf("entries with no match:\n%s", got)
	}
	if got := cliOK(t, with("entries", "--state", "parked", "--full-error", "--topic", "payments")...); !strings.Contains(got, "MIDDLE-MARKER") || !strings.Contains(got, clitest.KafkaHint) {
		t.Errorf("entries --full-error:\n%s", got)
	}
}

func showHistory(t *testing.T, with func(string, ...string) []string) {
	var j admincmd.ShowJSON
	jsonOf(t, &j, with("show", "s0")...)
	if len(j.History) != 2 || j.History[0].Owner != "relay-1" || j.History[0].Error != stuckErr1 ||
		j.History[1].Owner != "relay-2" || j.History[1].Error != stuckErr2 || j.History[1].At.Before(j.History[0].At) || j.Deferred {
		t.Errorf("show s0 -o json history: %+v, deferred %v; want relay-1's then relay-2's attempt, not deferred", j.History, j.Deferred)
	}
	text := cliOK(t, with("show", "s0")...)
	i1, i2 := strings.Index(text, stuckErr1), strings.Index(text, stuckErr2)
	for _, w := range []string{"history     the last 2 attempts, oldest first (the last 10 are kept)", "  1. ", " by relay-1\n", "  2. ", " by relay-2\n"} {
		if !strings.Contains(text, w) {
			t.Errorf("show s0 lacks %q:\n%s", w, text)
		}
	}
	if i1 < 0 || i2 < 0 || strings.Index(text, "by relay-1") > i1 || i1 > strings.Index(text, "by relay-2") {
		t.Errorf("show s0: the attempts are not listed oldest first, each after its time and owner:\n%s", text)
	}
	var never admincmd.ShowJSON
	jsonOf(t, &never, with("show", "e0")...)
	if never.History == nil || len(never.History) != 0 {
		t.Errorf("show e0 -o json: history %v; want [] for an entry never attempted", never.History)
	}
	if got := cliOK(t, with("show", "e0")...); !strings.Contains(got, "history     (no attempt recorded)") {
		t.Errorf("show e0:\n%s", got)
	}
}

func pauseResume(t *testing.T, with func(string, ...string) []string, partitions int) {
	pauseTopic(t, with)
	pausePartition(t, with, partitions)
	resumeBoth(t, with)
}

// pauseTopic: pausing a topic says so, shows in status, is idempotent and
// blocks the topic's failing key for "paused".
func pauseTopic(t *testing.T, with func(string, ...string) []string) {
	textHas(t, "pause --topic", cliOK(t, with("pause", "--topic", "shipments")...),
		`paused topic "shipments" of `, "every relay stops handing its entries to the sink within one poll interval", "no attempt counted", "`outbox resume ")
	var st admincmd.StatusJSON
	jsonOf(t, &st, with("status")...)
	if st.Paused == nil || len(st.Paused.Topics) != 1 || len(st.Paused.Partitions) != 0 {
		t.Fatalf("status after pause: paused %+v", st.Paused)
	}
	pt := st.Paused.Topics[0]
	if pt.Topic != "shipments" || pt.Since.IsZero() {
		t.Errorf("status after pause: paused topic %+v", pt)
	}
	since := pt.Since.Format(time.RFC3339)
	textHas(t, "status after pause", cliOK(t, with("status")...), `paused: topic "shipments" since `+since+" (its entries stay pending and hold back their keys; `outbox resume --")
	textHas(t, "pause of a paused topic", cliOK(t, with("pause", "--topic", "shipments")...), `topic "shipments" of `, "was already paused (since "+since+"): nothing changed")
	var b admincmd.BlockedJSON
	jsonOf(t, &b, with("blocked")...)
	if len(b.Blocked) != 1 || b.Blocked[0].Reason != "paused" {
		t.Errorf("blocked while shipments is paused: %+v; want ship-1 with reason paused", b.Blocked)
	}
	textHas(t, "blocked while shipments is paused", cliOK(t, with("blocked")...), "topic paused")
}

// pausePartition: pausing a partition says what is paused now and shows in
// status; one out of range is refused, naming the flag.
func pausePartition(t *testing.T, with func(string, ...string) []string, partitions int) {
	textHas(t, "pause --partition 1", cliOK(t, with("pause", "--partition", "1")...),
		"paused partition 1 of ", `paused now: topic "shipments" (since `, "partition 1 (since ")
	var st admincmd.StatusJSON
	jsonOf(t, &st, with("status")...)
	if len(st.Paused.Partitions) != 1 || st.Paused.Partitions[0].Partition != 1 {
		t.Errorf("status after pausing partition 1: %+v", st.Paused)
	}
	cliFails(t, 2, []string{fmt.Sprintf("--partition: %d is out of range: the outbox has partitions 0 to %d", partitions, partitions-1)}, with("pause", "--partition", fmt.Sprint(partitions))...)
}

// resumeBoth: resuming says what changed, is idempotent, and status shows
// nothing paused after.
func resumeBoth(t *testing.T, with func(string, ...string) []string) {
	textHas(t, "resume --topic", cliOK(t, with("resume", "--topic", "shipments")...),
		`resumed topic "shipments" of `, "every relay delivers its entries again within one poll interval")
	textHas(t, "resume of a topic not paused", cliOK(t, with("resume", "--topic", "shipments")...), "was not paused: nothing changed")
	textHas(t, "resume --partition 1", cliOK(t, with("resume", "--partition", "1")...), "resumed partition 1 of ")
	var st admincmd.StatusJSON
	jsonOf(t, &st, with("status")...)
	if st.Paused == nil || len(st.Paused.Topics) != 0 || len(st.Paused.Partitions) != 0 {
		t.Errorf("status after resuming everything: paused %+v", st.Paused)
	}
	if text := cliOK(t, with("status")...); strings.Contains(text, "paused:") {
		t.Errorf("status after resuming everything still says paused:\n%s", text)
	}
}

func relays(t *testing.T, s operatorStore, with func(string, ...string) []string) {
	var r admincmd.RelaysJSON
	jsonOf(t, &r, with("relays")...)
	if len(r.Relays) != 0 || len(r.Unheld) != 2 {
		t.Errorf("relays with none running: %+v; want no relay and both partitions unheld (both have pending entries)", r)
	}
	textHas(t, "relays with none running", cliOK(t, with("relays")...), "no relay is running", "! partition 0 is held by no relay while")
	release := relaysWithHeartbeats(t, s, with)
	defer release()
	relaysWithAToolHoldingALease(t, s, with)
}

// relaysWithHeartbeats: two relays heartbeat through the SPI, relay-a
// holds partition 0; relays shows both and flags partition 1. It returns
// what releases relay-a's lease.
func relaysWithHeartbeats(t *testing.T, s operatorStore, with func(string, ...string) []string) (release func()) {
	ctx := context.Background()
	started := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	for _, m := range []outbox.Member{
		{Owner: "relay-a", Partitions: []int{0}, Host: "host-a", Version: "v9.1.0", Started: started},
		{Owner: "relay-b", Host: "host-b", Version: "v9.1.1", Started: started},
	} {
		if _, err := s.Heartbeat(ctx, m, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := s.AcquireLease(ctx, 0, "relay-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	release = func() { _ = s.ReleaseLease(ctx, lease) }

	var r admincmd.RelaysJSON
	jsonOf(t, &r, with("relays")...)
	if len(r.Relays) != 2 {
		t.Fatalf("relays: %+v", r.Relays)
	}
	a, b := r.Relays[0], r.Relays[1]
	if got, want := fmt.Sprint(a.Owner, a.Listed, a.Host, a.Version, a.Partitions, a.Reported), fmt.Sprint("relay-a", true, "host-a", "v9.1.0", []int{0}, []int{0}); got != want {
		t.Errorf("relays: relay-a's owner, listed, host, version, partitions, reported = %s; want %s", got, want)
	}
	if a.Started == nil || !a.Started.Equal(started) || a.LastHeartbeat == nil || a.Expires == nil {
		t.Errorf("relays: relay-a %+v; want its start (%v), last heartbeat and expiry", a, started)
	}
	if b.Owner != "relay-b" || !b.Listed || len(b.Partitions) != 0 {
		t.Errorf("relays: relay-b %+v; want listed, holding nothing", b)
	}
	if len(r.Unheld) != 1 || r.Unheld[0].Partition != 1 || r.Unheld[0].Pending == 0 {
		t.Errorf("relays: unheld %+v; want partition 1 with its pending entries", r.Unheld)
	}
	text := cliOK(t, with("relays")...)
	textHas(t, "relays", text, ", 2 relays", "OWNER", "LAST HEARTBEAT", "relay-a", "host-a", "v9.1.0", started.Format(time.RFC3339), "ago)", "relay-b",
		"! partition 1 is held by no relay while")
	if strings.Contains(text, "! partition 0") {
		t.Errorf("relays flags partition 0, which relay-a holds:\n%s", text)
	}
	return release
}

// relaysWithAToolHoldingALease: a lease holder without a membership record
// is listed as such, and its partition is not flagged.
func relaysWithAToolHoldingALease(t *testing.T, s operatorStore, with func(string, ...string) []string) {
	ctx := context.Background()
	tool, err := s.AcquireLease(ctx, 1, "tool-x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.ReleaseLease(ctx, tool) }()
	var r admincmd.RelaysJSON
	jsonOf(t, &r, with("relays")...)
	if len(r.Relays) != 3 || len(r.Unheld) != 0 {
		t.Fatalf("relays with tool-x holding partition 1: %+v, unheld %+v", r.Relays, r.Unheld)
	}
	if x := r.Relays[2]; x.Owner != "tool-x" || x.Listed || x.LastHeartbeat != nil || !slices.Equal(x.Partitions, []int{1}) {
		t.Errorf("relays: tool-x %+v; want not listed, no heartbeat, holding partition 1", x)
	}
	text := cliOK(t, with("relays")...)
	textHas(t, "relays with tool-x holding partition 1", text, "- (no membership record: it holds a lease but does not heartbeat)")
	if strings.Contains(text, "! partition") {
		t.Errorf("relays with tool-x holding partition 1 flags a partition:\n%s", text)
	}
}

func TestOperatorsOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	opts := pgoutbox.Options{Schema: schema, Partitions: 2}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	appendFn := func(e ...outbox.Entry) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, e...) })
	}
	clitest.SeedAdmin(t, b, appendFn)
	exerciseOperators(t, b, appendFn, "--store", url, "--schema", schema)
}

func TestOperatorsOnRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	appendFn := func(e ...outbox.Entry) error { return b.Append(ctx, e...) }
	clitest.SeedAdmin(t, b, appendFn)
	exerciseOperators(t, b, appendFn, "--store", url, "--prefix", prefix)
}

// TestRelaysShowsALiveRelay: `outbox relays` lists an `outbox relay`
// running in this process, with its owner, host, the CLI's version, its
// start and heartbeat, and the partitions it holds; once it stops (and
// leaves the fleet), none.
func TestRelaysShowsALiveRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	flags := []string{"--store", url, "--prefix", prefix}
	before := time.Now()
	run := startCLI(t, append([]string{"relay", "--kafka-brokers", strings.Join(cluster.ListenAddrs(), ","), "--owner", "relay-live",
		"--poll-interval", "100ms", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t))}, flags...)...)
	run.waitFor(t, regexp.MustCompile(`(outbox relay: running)`))

	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	var r admincmd.RelaysJSON
	deadline := time.Now().Add(time.Minute) // watchdog: the relay takes both partitions within a lease or so
	for {
		jsonOf(t, &r, append([]string{"relays"}, flags...)...)
		if len(r.Relays) == 1 && len(r.Relays[0].Partitions) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(r.Relays) != 1 {
		t.Fatalf("relays with one relay running: %+v", r.Relays)
	}
	got := r.Relays[0]
	if got.Owner != "relay-live" || !got.Listed || got.Host != host || got.Version != "test" || got.Started == nil ||
		got.Started.Before(before.Add(-time.Second)) || got.LastHeartbeat == nil || !slices.Equal(got.Partitions, []int{0, 1}) || len(r.Unheld) != 0 {
		t.Errorf("relays: %+v, unheld %+v; want relay-live on %s, version test, started after %v, holding 0 and 1", got, r.Unheld, host, before)
	}
	if text := cliOK(t, append([]string{"relays"}, flags...)...); !strings.Contains(text, "1 relay\n") || !strings.Contains(text, "relay-live") || !strings.Contains(text, "0, 1") {
		t.Errorf("relays:\n%s", text)
	}
	if code := run.finish(t); code != 0 {
		t.Fatalf("the relay exited %d\n%s%s", code, run.out, run.errs)
	}
	jsonOf(t, &r, append([]string{"relays"}, flags...)...)
	if len(r.Relays) != 0 {
		t.Errorf("relays after the relay stopped: %+v; want none (it leaves the fleet and releases its leases)", r.Relays)
	}
}
