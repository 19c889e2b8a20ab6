package app

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"
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

	t.Run("StuckKeyFoundThroughStatusAndBlocked", func(t *testing.T) { stuckKey(t, with, stuckPartition) })
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
	cliOK(t, with("cancel", "s0")...)

	var b admincmd.BlockedJSON
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

func stuckKey(t *testing.T, with func(string, ...string) []string, part int) {
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
			continue
		}
		if p.OldestDueID == nil {
			continue
		}
		// The oldest due entry is due, of this partition, and due no
		// later than any due entry of it.
		var oldest admincmd.ShowJSON
		jsonOf(t, &oldest, with("show", *p.OldestDueID)...)
		var due admincmd.EntriesJSON
		jsonOf(t, &due, with("entries", "--state", "due")...)
		for _, e := range due.Entries {
			if e.Partition == p.Partition && e.DueAt.Before(*oldest.DueAt) {
				t.Errorf("status: partition %d's oldest due is %s (due %v), but %s is due earlier (%v)", p.Partition, oldest.ID, oldest.DueAt, e.ID, e.DueAt)
			}
		}
		if oldest.Partition != p.Partition || oldest.DueAt.After(time.Now()) {
			t.Errorf("status: partition %d's oldest due entry %s is of partition %d, due %v", p.Partition, oldest.ID, oldest.Partition, oldest.DueAt)
		}
	}
	text := cliOK(t, with("status")...)
	for _, w := range []string{"OLDEST DUE", "BLOCKED KEYS", "(1 key is blocked by a failing, deferred or paused head entry: `outbox blocked --"} {
		if !strings.Contains(text, w) {
			t.Errorf("status lacks %q:\n%s", w, text)
		}
	}

	var b admincmd.BlockedJSON
	jsonOf(t, &b, with("blocked")...)
	if len(b.Blocked) != 1 || b.NextAfter != nil {
		t.Fatalf("blocked: %+v; want the one key ship-1", b)
	}
	k := b.Blocked[0]
	if k.Key != "ship-1" || k.Topic != "shipments" || k.Partition != part || k.Reason != "failing" || k.Head.ID != "s0" ||
		k.Head.Attempts != 2 || k.Waiting != 2 || k.Head.LastError != stuckErr2 || k.Head.DueAt == nil ||
		k.Head.DueAt.Before(time.Now().Add(50*time.Minute)) || len(k.Head.History) != 2 || k.BlockedSeconds < 0 ||
		!k.Since.Equal(k.Head.History[0].At) {
		t.Errorf("blocked: %+v; want ship-1 blocked by s0 (2 attempts, the second's error, due in an hour) since its first attempt, 2 waiting", k)
	}
	text = cliOK(t, with("blocked")...)
	for _, w := range []string{"KEY", "WAITING", "ship-1", "shipments", "s0", "failing", "NOT_LEADER_FOR_PARTITION", "(in ", "(`outbox show --", " HEAD` shows a head's attempts"} {
		if !strings.Contains(text, w) {
			t.Errorf("blocked lacks %q:\n%s", w, text)
		}
	}
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
	got := cliOK(t, with("pause", "--topic", "shipments")...)
	for _, w := range []string{`paused topic "shipments" of `, "every relay stops handing its entries to the sink within one poll interval", "no attempt counted", "`outbox resume "} {
		if !strings.Contains(got, w) {
			t.Errorf("pause --topic lacks %q:\n%s", w, got)
		}
	}
	var st admincmd.StatusJSON
	jsonOf(t, &st, with("status")...)
	if st.Paused == nil || len(st.Paused.Topics) != 1 || st.Paused.Topics[0].Topic != "shipments" || st.Paused.Topics[0].Since.IsZero() || len(st.Paused.Partitions) != 0 {
		t.Fatalf("status after pause: paused %+v", st.Paused)
	}
	if text := cliOK(t, with("status")...); !strings.Contains(text, `paused: topic "shipments" since `+st.Paused.Topics[0].Since.Format(time.RFC3339)+" (its entries stay pending and hold back their keys; `outbox resume --") {
		t.Errorf("status after pause:\n%s", text)
	}
	if got := cliOK(t, with("pause", "--topic", "shipments")...); !strings.Contains(got, `topic "shipments" of `) || !strings.Contains(got, "was already paused (since "+st.Paused.Topics[0].Since.Format(time.RFC3339)+"): nothing changed") {
		t.Errorf("pause of a paused topic:\n%s", got)
	}
	var b admincmd.BlockedJSON
	jsonOf(t, &b, with("blocked")...)
	if len(b.Blocked) != 1 || b.Blocked[0].Reason != "paused" {
		t.Errorf("blocked while shipments is paused: %+v; want ship-1 with reason paused", b.Blocked)
	}
	if text := cliOK(t, with("blocked")...); !strings.Contains(text, "topic paused") {
		t.Errorf("blocked while shipments is paused:\n%s", text)
	}

	got = cliOK(t, with("pause", "--partition", "1")...)
	if !strings.Contains(got, "paused partition 1 of ") || !strings.Contains(got, `paused now: topic "shipments" (since `) || !strings.Contains(got, "partition 1 (since ") {
		t.Errorf("pause --partition 1:\n%s", got)
	}
	jsonOf(t, &st, with("status")...)
	if len(st.Paused.Partitions) != 1 || st.Paused.Partitions[0].Partition != 1 {
		t.Errorf("status after pausing partition 1: %+v", st.Paused)
	}
	cliFails(t, 2, []string{fmt.Sprintf("--partition: %d is out of range: the outbox has partitions 0 to %d", partitions, partitions-1)}, with("pause", "--partition", fmt.Sprint(partitions))...)

	got = cliOK(t, with("resume", "--topic", "shipments")...)
	if !strings.Contains(got, `resumed topic "shipments" of `) || !strings.Contains(got, "every relay delivers its entries again within one poll interval") {
		t.Errorf("resume --topic:\n%s", got)
	}
	if got := cliOK(t, with("resume", "--topic", "shipments")...); !strings.Contains(got, "was not paused: nothing changed") {
		t.Errorf("resume of a topic not paused:\n%s", got)
	}
	if got := cliOK(t, with("resume", "--partition", "1")...); !strings.Contains(got, "resumed partition 1 of ") {
		t.Errorf("resume --partition 1:\n%s", got)
	}
	jsonOf(t, &st, with("status")...)
	if st.Paused == nil || len(st.Paused.Topics) != 0 || len(st.Paused.Partitions) != 0 {
		t.Errorf("status after resuming everything: paused %+v", st.Paused)
	}
	if text := cliOK(t, with("status")...); strings.Contains(text, "paused:") {
		t.Errorf("status after resuming everything still says paused:\n%s", text)
	}
}

func relays(t *testing.T, s operatorStore, with func(string, ...string) []string) {
	ctx := context.Background()
	var r admincmd.RelaysJSON
	jsonOf(t, &r, with("relays")...)
	if len(r.Relays) != 0 || len(r.Unheld) != 2 {
		t.Errorf("relays with none running: %+v; want no relay and both partitions unheld (both have pending entries)", r)
	}
	if text := cliOK(t, with("relays")...); !strings.Contains(text, "no relay is running") || !strings.Contains(text, "! partition 0 is held by no relay while") {
		t.Errorf("relays with none running:\n%s", text)
	}

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
	defer func() { _ = s.ReleaseLease(ctx, lease) }()

	jsonOf(t, &r, with("relays")...)
	if len(r.Relays) != 2 {
		t.Fatalf("relays: %+v", r.Relays)
	}
	a, b := r.Relays[0], r.Relays[1]
	if a.Owner != "relay-a" || !a.Listed || a.Host != "host-a" || a.Version != "v9.1.0" || a.Started == nil || !a.Started.Equal(started) ||
		a.LastHeartbeat == nil || a.Expires == nil || !slices.Equal(a.Partitions, []int{0}) || !slices.Equal(a.Reported, []int{0}) {
		t.Errorf("relays: relay-a %+v; want its host, version, start, heartbeat and partition 0", a)
	}
	if b.Owner != "relay-b" || !b.Listed || len(b.Partitions) != 0 {
		t.Errorf("relays: relay-b %+v; want listed, holding nothing", b)
	}
	if len(r.Unheld) != 1 || r.Unheld[0].Partition != 1 || r.Unheld[0].Pending == 0 {
		t.Errorf("relays: unheld %+v; want partition 1 with its pending entries", r.Unheld)
	}
	text := cliOK(t, with("relays")...)
	for _, w := range []string{", 2 relays", "OWNER", "LAST HEARTBEAT", "relay-a", "host-a", "v9.1.0", started.Format(time.RFC3339), "ago)", "relay-b",
		"! partition 1 is held by no relay while"} {
		if !strings.Contains(text, w) {
			t.Errorf("relays lacks %q:\n%s", w, text)
		}
	}
	if strings.Contains(text, "! partition 0") {
		t.Errorf("relays flags partition 0, which relay-a holds:\n%s", text)
	}

	// A lease holder without a membership record is listed as such.
	tool, err := s.AcquireLease(ctx, 1, "tool-x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.ReleaseLease(ctx, tool) }()
	jsonOf(t, &r, with("relays")...)
	if len(r.Relays) != 3 || r.Relays[2].Owner != "tool-x" || r.Relays[2].Listed || r.Relays[2].LastHeartbeat != nil ||
		!slices.Equal(r.Relays[2].Partitions, []int{1}) || len(r.Unheld) != 0 {
		t.Errorf("relays with tool-x holding partition 1: %+v, unheld %+v", r.Relays, r.Unheld)
	}
	if text := cliOK(t, with("relays")...); !strings.Contains(text, "- (no membership record: it holds a lease but does not heartbeat)") || strings.Contains(text, "! partition") {
		t.Errorf("relays with tool-x holding partition 1:\n%s", text)
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
