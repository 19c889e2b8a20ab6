package ui_test

// Tests of the operator endpoints of issue 28 (operate.go) and of what
// issue 28 added to the others: /api/entries?state=, /api/blocked,
// /api/relays, /api/pause and /api/resume, the paused topics and
// partitions in /api/overview and /api/partitions, and an entry's state,
// history and actions. They run on the memory backend; the browser tests
// run the same views on PostgreSQL.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/ui"
)

type item struct {
	summary
	LastErrorBytes int        `json:"last_error_bytes"`
	State          string     `json:"state"`
	DueAt          *time.Time `json:"due_at"`
	Deferred       bool       `json:"deferred"`
}

type listPage struct {
	State     string  `json:"state"`
	Entries   []item  `json:"entries"`
	NextAfter *string `json:"next_after"`
}

type blockedPage struct {
	Keys []struct {
		Head    item      `json:"head"`
		Waiting int64     `json:"waiting"`
		Since   time.Time `json:"since"`
	} `json:"keys"`
	NextAfter *string `json:"next_after"`
}

// states is a memory outbox of 4 partitions with entries in every state,
// by the clock clk:
//
//	due-1..due-3        appended, due now (topic orders)
//	sched-1, sched-2    NotBefore in an hour (topic orders)
//	retry-1             failed once with "broker down", due again in 10 min (key k-retry)
//	retry-1-next        appended after retry-1, same key: waits behind it
//	park-1, park-2      parked (topic payments), park-2 after 3 attempts
func states(t *testing.T, clk *clock) *memory.Backend {
	t.Helper()
	b := memory.New(memory.Options{Partitions: 4, Now: clk.Now})
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	appendAll := func(es ...outbox.Entry) {
		t.Helper()
		for _, e := range es {
			if err := b.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Second)
		}
	}
	// The parked ones first, so that they are the only ones fetched.
	appendAll(outbox.Entry{ID: "park-1", Topic: "payments", Key: "p1"}, outbox.Entry{ID: "park-2", Topic: "payments", Key: "p2"})
	fail(t, b, map[string]int{"park-1": 1, "park-2": 3}, true)
	appendAll(outbox.Entry{ID: "retry-1", Topic: "orders", Key: "k-retry"}, outbox.Entry{ID: "retry-1-next", Topic: "orders", Key: "k-retry"})
	fail(t, b, map[string]int{"retry-1": 1}, false)
	appendAll(
		outbox.Entry{ID: "due-1", Topic: "orders", Key: "a"}, outbox.Entry{ID: "due-2", Topic: "orders", Key: "b"},
		outbox.Entry{ID: "due-3", Topic: "orders", Key: "c"},
		outbox.Entry{ID: "sched-1", Topic: "orders", Key: "s1", NotBefore: clk.Now().Add(time.Hour)},
		outbox.Entry{ID: "sched-2", Topic: "orders", Key: "s2", NotBefore: clk.Now().Add(time.Hour)},
	)
	return b
}

// fail claims the due entries of b and fails those named in tries, each
// as many times as it says (re-fetching it each time, as a relay would
// after its retry delay): the last failure parks it when park is set, else
// retries it in 10 minutes. The other claimed entries are released.
func fail(t *testing.T, b *memory.Backend, tries map[string]int, park bool) {
	t.Helper()
	ctx := context.Background()
	left := map[string]int{}
	for id, n := range tries {
		left[id] = n
	}
	for round := 0; len(left) > 0; round++ {
		if round > 20 {
			t.Fatalf("could not fail %v", left)
		}
		for p := range b.Partitions() {
			lease, err := b.AcquireLease(ctx, p, fmt.Sprintf("relay-%d", round%2), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			batch, err := b.FindPendingBatch(ctx, lease, 100)
			if err != nil {
				t.Fatal(err)
			}
			var fs []outbox.Failure
			var release []string
			for _, e := range batch {
				n, ok := left[e.ID]
				if !ok {
					release = append(release, e.ID)
					continue
				}
				last := n == 1
				fs = append(fs, outbox.Failure{ID: e.ID, Error: fmt.Sprintf("broker down (try %d of %s)", tries[e.ID]-n+1, e.ID), Park: last && park, Delay: retryDelay(last)})
				if left[e.ID]--; left[e.ID] == 0 {
					delete(left, e.ID)
				}
			}
			if err := b.MarkFailed(ctx, lease, fs); err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx, lease, release); err != nil {
				t.Fatal(err)
			}
			if err := b.ReleaseLease(ctx, lease); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// retryDelay: 0 (due again at once) before the last failure, 10 minutes
// after it.
func retryDelay(last bool) time.Duration {
	if last {
		return 10 * time.Minute
	}
	return 0
}

func ids(es []item) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func TestEntriesByState(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := states(t, clk)
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))
	for state, want := range map[string][]string{
		"due":       {"due-1", "due-2", "due-3", "retry-1-next"},
		"scheduled": {"sched-1", "sched-2"},
		"retrying":  {"retry-1"},
		"parked":    {"park-1", "park-2"},
	} {
		var p listPage
		c.getJSON("/api/entries?state="+state, &p)
		if got := ids(p.Entries); !reflect.DeepEqual(got, want) || p.State != state || p.NextAfter != nil {
			t.Errorf("state=%s: %v (state %q, next %v), want %v and no next page", state, got, p.State, p.NextAfter, want)
		}
		for _, e := range p.Entries {
			if e.State != state {
				t.Errorf("state=%s: %s says state %q", state, e.ID, e.State)
			}
		}
	}
	var p listPage
	c.getJSON("/api/entries?state=retrying", &p)
	r := p.Entries[0]
	if r.Attempts != 1 || r.LastError != "broker down (try 1 of retry-1)" || r.LastErrorBytes != len(r.LastError) || r.DueAt == nil || !r.DueAt.After(clk.Now()) {
		t.Errorf("retry-1 is listed as %+v; want 1 attempt, its error, due in the future", r)
	}
	c.getJSON("/api/entries?state=parked", &p)
	if p.Entries[1].Attempts != 3 || p.Entries[1].DueAt != nil {
		t.Errorf("park-2 is listed as %+v; want 3 attempts and no due time", p.Entries[1])
	}

	t.Run("FiltersAndPaging", func(t *testing.T) {
		var p listPage
		c.getJSON("/api/entries?state=due&key=b", &p)
		if got := ids(p.Entries); !reflect.DeepEqual(got, []string{"due-2"}) {
			t.Errorf("key=b: %v", got)
		}
		c.getJSON("/api/entries?state=due&error=BROKER", &p)
		if got := ids(p.Entries); len(got) != 0 {
			t.Errorf("error=BROKER among due entries never attempted: %v", got)
		}
		c.getJSON("/api/entries?state=parked&error=TRY+3", &p)
		if got := ids(p.Entries); !reflect.DeepEqual(got, []string{"park-2"}) {
			t.Errorf("error=TRY 3: %v", got)
		}
		c.getJSON("/api/entries?state=due&topic=payments", &p)
		if len(p.Entries) != 0 {
			t.Errorf("topic=payments among due entries: %v", ids(p.Entries))
		}
		since := url.QueryEscape(newClock().Now().Add(4 * time.Second).Format(time.RFC3339))
		c.getJSON("/api/entries?state=due&since="+since, &p)
		if got := ids(p.Entries); !reflect.DeepEqual(got, []string{"due-1", "due-2", "due-3"}) {
			t.Errorf("since the 5th append: %v", got)
		}
		var all []string
		after := ""
		for range 10 {
			c.getJSON("/api/entries?state=due&limit=3&after="+url.QueryEscape(after), &p)
			all = append(all, ids(p.Entries)...)
			if p.NextAfter == nil {
				break
			}
			after = *p.NextAfter
		}
		if !reflect.DeepEqual(all, []string{"due-1", "due-2", "due-3", "retry-1-next"}) {
			t.Errorf("pages of 3: %v", all)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		wantError(t, c.do("GET", "/api/entries", nil, nil), 400, "state", "due, scheduled, retrying, parked")
		wantError(t, c.do("GET", "/api/entries?state=pending", nil, nil), 400, "state", `"pending"`)
		wantError(t, c.do("GET", "/api/entries?state=due&limit=0", nil, nil), 400, "limit")
		wantError(t, c.do("GET", "/api/entries?state=due&limit=x", nil, nil), 400, "limit")
		wantError(t, c.do("GET", "/api/entries?state=due&since=yesterday", nil, nil), 400, "since")
		wantError(t, c.do("GET", "/api/entries?state=due&until=soon", nil, nil), 400, "until")
		wantError(t, c.do("POST", "/api/entries?state=due", nil, nil), 405, "GET")
	})
}

// inspectorOnly is a real memory backend seen through the interfaces of a
// store that implements Inspector and Looker only: none of issue 28's.
type inspectorOnly struct {
	outbox.Store
	outbox.Inspector
	outbox.Looker
}

func TestOperatorViewsWithoutTheirInterfaces(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := states(t, clk)
	c := newClient(t, newServer(t, inspectorOnly{b, b, b}, ui.Options{Now: clk.Now}))
	c.page()
	var p listPage
	c.getJSON("/api/entries?state=parked", &p)
	if got := ids(p.Entries); !reflect.DeepEqual(got, []string{"park-1", "park-2"}) {
		t.Errorf("state=parked without a Lister: %v, want it from the parked entries", got)
	}
	wantError(t, c.do("GET", "/api/entries?state=due", nil, nil), 501, "outbox.Lister", "state=parked")
	wantError(t, c.do("GET", "/api/blocked", nil, nil), 501, "outbox.Lister")
	wantError(t, c.do("GET", "/api/relays", nil, nil), 501, "outbox.PartitionInspector")
	wantError(t, c.post("/api/pause", map[string]any{"topic": "orders"}), 501, "outbox.Pauser", "pause")
	var ov struct {
		Paused   *struct{} `json:"paused"`
		Features map[string]bool
	}
	c.getJSON("/api/overview", &ov)
	if ov.Paused != nil || ov.Features["states"] || ov.Features["pause"] || ov.Features["relays"] || !ov.Features["entry"] {
		t.Errorf("overview without the operator interfaces: paused %v, features %v", ov.Paused, ov.Features)
	}
}

func TestEntryStateHistoryAndActions(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := states(t, clk)
	type detail struct {
		entryDetail
		Status   string `json:"status"`
		Deferred bool   `json:"deferred"`
		History  []struct {
			At    time.Time `json:"at"`
			Owner string    `json:"owner"`
			Error string    `json:"error"`
		} `json:"history"`
		Actions struct{ Requeue, Cancel bool } `json:"actions"`
	}
	for _, ro := range []bool{false, true} {
		c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now, ReadOnly: ro}))
		for id, want := range map[string]struct {
			status, state   string
			attempts        int
			requeue, cancel bool
		}{
			"due-1":   {"due", "pending", 0, false, true},
			"sched-1": {"scheduled", "pending", 0, false, true},
			"retry-1": {"retrying", "pending", 1, false, true},
			"park-2":  {"parked", "parked", 3, true, true},
		} {
			var d detail
			c.getJSON("/api/entries/"+id, &d)
			want.requeue, want.cancel = want.requeue && !ro, want.cancel && !ro
			if d.Status != want.status || d.State != want.state || len(d.History) != want.attempts ||
				d.Actions.Requeue != want.requeue || d.Actions.Cancel != want.cancel {
				t.Errorf("read-only %v: %s: status %q state %q, %d attempts in the history, actions %+v; want %+v",
					ro, id, d.Status, d.State, len(d.History), d.Actions, want)
			}
		}
	}
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))
	var d detail
	c.getJSON("/api/entries/park-2", &d)
	for i, a := range d.History {
		if want := fmt.Sprintf("broker down (try %d of park-2)", i+1); a.Error != want || !strings.HasPrefix(a.Owner, "relay-") || a.At.IsZero() {
			t.Errorf("attempt %d: %+v, want error %q by a relay-N owner, with a time", i, a, want)
		}
		if i > 0 && a.At.Before(d.History[i-1].At) {
			t.Errorf("attempt %d at %v is before attempt %d at %v: want the oldest first", i, a.At, i-1, d.History[i-1].At)
		}
	}
	if d.Payload.Base64 == "" && d.Payload.Bytes != 0 {
		t.Errorf("the payload is missing without payload=none")
	}
	w := c.do("GET", "/api/entries/park-2?payload=none", nil, nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"payload":null`) || !strings.Contains(w.Body.String(), "try 3 of park-2") {
		t.Errorf("payload=none: %d %s; want the entry with its error and a null payload", w.Code, w.Body)
	}
	wantError(t, c.do("GET", "/api/entries/park-2?payload=all", nil, nil), 400, "payload")
	// Requeue of a pending entry is refused, as the actions say.
	c.page()
	var rq requeueResult
	decode(t, c.post("/api/requeue", map[string]any{"ids": []string{"retry-1"}}), &rq)
	if rq.Requeued != 0 || len(rq.Refused) != 1 || !strings.Contains(rq.Refused[0].Reason, "not parked") {
		t.Errorf("requeue of a retrying entry: %+v, want it refused as not parked", rq)
	}
}

func TestBlockedKeys(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := states(t, clk)
	// A second blocked key, blocked later: k-late, with two entries behind.
	ctx := context.Background()
	for _, id := range []string{"late-1", "late-2", "late-3"} {
		if err := b.Append(ctx, outbox.Entry{ID: id, Topic: "shipments", Key: "k-late"}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(time.Minute)
	fail(t, b, map[string]int{"late-1": 1}, false)
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))
	var p blockedPage
	c.getJSON("/api/blocked", &p)
	var got []string
	for _, k := range p.Keys {
		got = append(got, fmt.Sprintf("%s:%s+%d", k.Head.Key, k.Head.ID, k.Waiting))
	}
	if want := []string{"k-retry:retry-1+1", "k-late:late-1+2"}; !reflect.DeepEqual(got, want) || p.NextAfter != nil {
		t.Fatalf("blocked keys %v (next %v), want %v, the longest blocked first", got, p.NextAfter, want)
	}
	h := p.Keys[0].Head
	if h.State != "retrying" || h.Attempts != 1 || h.LastError == "" || h.DueAt == nil || p.Keys[0].Since.IsZero() {
		t.Errorf("the head of k-retry: %+v since %v", h, p.Keys[0].Since)
	}

	// Paging: one key a page, and the cursor of the first leads to the second.
	c.getJSON("/api/blocked?limit=1", &p)
	if len(p.Keys) != 1 || p.Keys[0].Head.ID != "retry-1" || p.NextAfter == nil {
		t.Fatalf("first page of 1: %+v", p)
	}
	c.getJSON("/api/blocked?limit=1&after="+url.QueryEscape(*p.NextAfter), &p)
	if len(p.Keys) != 1 || p.Keys[0].Head.ID != "late-1" {
		t.Fatalf("second page of 1: %+v", p)
	}
	c.getJSON("/api/blocked?topic=shipments", &p)
	if len(p.Keys) != 1 || p.Keys[0].Head.ID != "late-1" {
		t.Errorf("topic=shipments: %+v", p.Keys)
	}

	checkBlockedByPartition(t, c, b, "retry-1", "late-1")

	t.Run("BadInput", func(t *testing.T) {
		wantError(t, c.do("GET", "/api/blocked?after=late-1", nil, nil), 400, "after")
		wantError(t, c.do("GET", "/api/blocked?partition=4", nil, nil), 400, "partition", "0 to 3")
		wantError(t, c.do("GET", "/api/blocked?partition=-1", nil, nil), 400, "partition")
		wantError(t, c.do("GET", "/api/blocked?limit=-5", nil, nil), 400, "limit")
		wantError(t, c.do("GET", "/api/blocked?since=never", nil, nil), 400, "since")
	})
}

// checkBlockedByPartition checks /api/blocked?partition=P for every
// partition: it lists the heads (of the blocked keys heads) of P, in order.
func checkBlockedByPartition(t *testing.T, c *client, b *memory.Backend, heads ...string) {
	t.Helper()
	part := map[string]int{}
	for _, id := range heads {
		info, err := b.Lookup(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		part[id] = info.Partition
	}
	for p0 := range b.Partitions() {
		var want []string
		for _, id := range heads {
			if part[id] == p0 {
				want = append(want, id)
			}
		}
		var p blockedPage
		c.getJSON(fmt.Sprintf("/api/blocked?partition=%d", p0), &p)
		var got []string
		for _, k := range p.Keys {
			got = append(got, k.Head.ID)
		}
		if !slices.Equal(got, want) || p.NextAfter != nil {
			t.Errorf("partition=%d: %v (next %v), want %v", p0, got, p.NextAfter, want)
		}
	}
}

func TestRelays(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := states(t, clk) // entries pending in several partitions
	ctx := context.Background()
	started := clk.Now().Add(-time.Hour)
	if _, err := b.Heartbeat(ctx, outbox.Member{Owner: "relay-b", Partitions: []int{0, 1}, Host: "host-b", Version: "v1.2.3", Started: started}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Heartbeat(ctx, outbox.Member{Owner: "relay-a", Host: "host-a", Version: "v1.2.4", Started: started, MaxPartitions: 2}, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{0, 1} {
		if _, err := b.AcquireLease(ctx, p, "relay-b", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.AcquireLease(ctx, 3, "cli-tool", time.Hour); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))
	var r relaysView
	c.getJSON("/api/relays", &r)
	if !r.Members || len(r.Relays) != 3 {
		t.Fatalf("relays: %+v, want relay-a, relay-b and cli-tool", r)
	}
	checkRelays(t, r, started)
	checkUnheld(t, b, r)
}

// relaysView is what /api/relays answers.
type relaysView struct {
	Members bool `json:"members"`
	Relays  []struct {
		Owner, Host, Version string
		Listed               bool
		Started, Renewed     *time.Time
		Expires              *time.Time
		MaxPartitions        int `json:"max_partitions"`
		Reported, Held       []int
	} `json:"relays"`
	Unheld []struct {
		Partition int   `json:"partition"`
		Pending   int64 `json:"pending"`
	} `json:"unheld"`
}

// checkRelays checks the relays of TestRelays: cli-tool, relay-a, relay-b.
func checkRelays(t *testing.T, r relaysView, started time.Time) {
	t.Helper()
	a, bb, tool := r.Relays[1], r.Relays[2], r.Relays[0]
	if tool.Owner != "cli-tool" || tool.Listed || !slices.Equal(tool.Held, []int{3}) {
		t.Errorf("the lease holder without a record: %+v", tool)
	}
	if a.Owner != "relay-a" || !a.Listed || a.Host != "host-a" || a.Version != "v1.2.4" || a.MaxPartitions != 2 || len(a.Held) != 0 ||
		a.Started == nil || !a.Started.Equal(started) || a.Renewed == nil || a.Expires == nil || !a.Expires.After(*a.Renewed) {
		t.Errorf("relay-a: %+v", a)
	}
	if bb.Owner != "relay-b" || !slices.Equal(bb.Held, []int{0, 1}) || !slices.Equal(bb.Reported, []int{0, 1}) {
		t.Errorf("relay-b: %+v", bb)
	}
}

// checkUnheld checks r's unheld partitions: partition 2 (no lease in
// TestRelays) when it has pending entries, and no other.
func checkUnheld(t *testing.T, b *memory.Backend, r relaysView) {
	t.Helper()
	st, err := b.PartitionStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, p := range st {
		if p.Partition == 2 && p.Pending > 0 {
			want = append(want, 2)
		}
	}
	var got []int
	for _, u := range r.Unheld {
		got = append(got, u.Partition)
		if u.Pending == 0 {
			t.Errorf("unheld partition %d has no pending entry", u.Partition)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("unheld partitions %v, want %v (partition 2 when it has pending entries)", got, want)
	}
}

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := states(t, clk)
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))
	c.page()
	type change struct {
		Target  string     `json:"target"`
		Changed bool       `json:"changed"`
		Since   *time.Time `json:"since"`
		Paused  struct {
			Topics []struct {
				Topic string    `json:"topic"`
				Since time.Time `json:"since"`
			} `json:"topics"`
			Partitions []struct {
				Partition int `json:"partition"`
			} `json:"partitions"`
		} `json:"paused"`
	}
	post := func(path string, body any) change {
		t.Helper()
		w := c.post(path, body)
		if w.Code != 200 {
			t.Fatalf("POST %s %v: %d %s", path, body, w.Code, w.Body)
		}
		var ch change
		decode(t, w, &ch)
		return ch
	}
	ch := post("/api/pause", map[string]any{"topic": "orders"})
	if !ch.Changed || ch.Target != `topic "orders"` || ch.Since == nil || len(ch.Paused.Topics) != 1 {
		t.Errorf("pause orders: %+v", ch)
	}
	if ch := post("/api/pause", map[string]any{"topic": "orders"}); ch.Changed {
		t.Errorf("pausing a paused topic again: %+v, want changed false", ch)
	}
	post("/api/pause", map[string]any{"partition": 2})
	p, err := b.Paused(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Topics) != 1 || p.Topics[0].Topic != "orders" || len(p.Partitions) != 1 || p.Partitions[0].Partition != 2 {
		t.Fatalf("the store has paused %+v, want topic orders and partition 2", p)
	}
	var ov struct {
		Paused struct {
			Topics     []struct{ Topic string }  `json:"topics"`
			Partitions []struct{ Partition int } `json:"partitions"`
		} `json:"paused"`
	}
	c.getJSON("/api/overview", &ov)
	if len(ov.Paused.Topics) != 1 || ov.Paused.Topics[0].Topic != "orders" || len(ov.Paused.Partitions) != 1 || ov.Paused.Partitions[0].Partition != 2 {
		t.Errorf("overview paused: %+v", ov.Paused)
	}
	var parts struct {
		Partitions []struct {
			Partition   int        `json:"partition"`
			PausedSince *time.Time `json:"paused_since"`
			BlockedKeys *int64     `json:"blocked_keys"`
		} `json:"partitions"`
	}
	c.getJSON("/api/partitions", &parts)
	for _, pp := range parts.Partitions {
		if (pp.PausedSince != nil) != (pp.Partition == 2) || pp.BlockedKeys == nil {
			t.Errorf("partition %d: paused since %v, blocked keys %v; want only 2 paused, and a count", pp.Partition, pp.PausedSince, pp.BlockedKeys)
		}
	}
	// The paused topic's due entries now block their keys.
	var bp blockedPage
	c.getJSON("/api/blocked?topic=orders", &bp)
	if len(bp.Keys) < 3 {
		t.Errorf("with orders paused, %d keys of orders are blocked; want its due heads too", len(bp.Keys))
	}
	ch = post("/api/resume", map[string]any{"topic": "orders"})
	if !ch.Changed || len(ch.Paused.Topics) != 0 {
		t.Errorf("resume orders: %+v", ch)
	}
	if ch := post("/api/resume", map[string]any{"topic": "orders"}); ch.Changed {
		t.Errorf("resuming a topic that is not paused: %+v, want changed false", ch)
	}
	post("/api/resume", map[string]any{"partition": 2})
	if p, _ := b.Paused(context.Background()); !p.Empty() {
		t.Errorf("after resuming both the store has paused %+v", p)
	}

	testPauseRefusals(t, c, b)

}

// testPauseRefusals checks what /api/pause and /api/resume refuse: bad
// bodies (400, naming what is wrong), read-only, and the checks of every
// action (CSRF, origin, content type); none of them pauses anything.
func testPauseRefusals(t *testing.T, c *client, b *memory.Backend) {
	t.Run("BadInput", func(t *testing.T) {
		wantError(t, c.post("/api/pause", map[string]any{}), 400, `"topic"`, `"partition"`)
		wantError(t, c.post("/api/pause", map[string]any{"topic": "a", "partition": 1}), 400, "not both")
		wantError(t, c.post("/api/pause", map[string]any{"partition": 4}), 400, "partition", "0 to 3")
		wantError(t, c.post("/api/resume", map[string]any{"partition": -1}), 400, "partition")
		wantError(t, c.post("/api/pause", map[string]any{"partition": "1"}), 400, "partition")
		wantError(t, c.post("/api/pause", map[string]any{"queue": "orders"}), 400, "queue")
		wantError(t, c.do("GET", "/api/pause", nil, nil), 405, "POST")
	})
	t.Run("Protected", func(t *testing.T) {
		ro := newClient(t, newServer(t, b, ui.Options{ReadOnly: true}))
		ro.page()
		for _, path := range []string{"/api/pause", "/api/resume"} {
			wantError(t, ro.post(path, map[string]any{"topic": "orders"}), 403, "read-only")
		}
		fresh := newClient(t, c.h) // no page load: no CSRF cookie
		wantError(t, fresh.post("/api/pause", map[string]any{"topic": "orders"}), 403, "CSRF")
		h := http.Header{"Content-Type": {"application/json"}, "X-Outbox-CSRF": {c.cookies["outbox_csrf"].Value}, "Origin": {"https://evil.example"}}
		wantError(t, c.do("POST", "/api/pause", map[string]any{"topic": "orders"}, h), 403, "another site")
		wantError(t, c.do("POST", "/api/pause", map[string]any{"topic": "orders"}, http.Header{"X-Outbox-CSRF": {c.cookies["outbox_csrf"].Value}}), 415, "JSON")
		if p, _ := b.Paused(context.Background()); !p.Empty() {
			t.Errorf("a refused pause paused %+v", p)
		}
	})
}
