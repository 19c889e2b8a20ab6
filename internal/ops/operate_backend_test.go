package ops_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/ops"
)

// operator is what the operator views need of a backend besides store.
type operator interface {
	store
	outbox.Lister
	outbox.Pauser
	outbox.Membership
	outbox.MemberLister
	outbox.PartitionInspector
}

func asOperator(t *testing.T, s store) operator {
	t.Helper()
	o, ok := s.(operator)
	if !ok {
		t.Fatalf("%T does not implement the operator interfaces of issue 28", s)
	}
	return o
}

// failHead makes one failed attempt, by owner, on the entry id: it claims
// the batch of id's partition, fails id (due again in an hour) and
// releases the rest.
func failHead(t *testing.T, s operator, id, owner, msg string) {
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
	found := false
	for _, e := range batch {
		if e.ID == id {
			found = true
		} else {
			rest = append(rest, e.ID)
		}
	}
	if !found {
		t.Fatalf("%s was not fetched: %v", id, batch)
	}
	if err := s.MarkFailed(ctx, lease, []outbox.Failure{{ID: id, Error: msg, Delay: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, lease, rest); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
}

func importAll(t *testing.T, s store, es ...outbox.EntryInfo) {
	t.Helper()
	if n, err := s.Import(context.Background(), es); err != nil || n != len(es) {
		t.Fatalf("Import: %d, %v; want %d", n, err, len(es))
	}
}

func infoIDs(es []outbox.EntryInfo) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func TestEntries(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s store) {
		o := asOperator(t, s)
		ctx := context.Background()
		now := time.Now()
		pending := func(id, topic string, due time.Time, attempts int, lastErr string) outbox.EntryInfo {
			return outbox.EntryInfo{Entry: outbox.Entry{ID: id, Topic: topic, Key: "k-" + id, Attempts: attempts, LastError: lastErr, CreatedAt: now.Add(-time.Hour)}, DueAt: due}
		}
		importAll(t, s,
			pending("d1", "orders", now.Add(-time.Minute), 0, ""),
			pending("d2", "payments", now.Add(-time.Minute), 0, ""),
			pending("d3", "orders", now.Add(-time.Minute), 0, ""),
			pending("s1", "orders", now.Add(time.Hour), 0, ""),
			pending("r1", "orders", now.Add(time.Hour), 2, "broker: Timeout"),
			outbox.EntryInfo{Entry: outbox.Entry{ID: "p1", Topic: "orders", Key: "kp", Attempts: 3, LastError: "refused", CreatedAt: now.Add(-time.Hour)}, Parked: true},
		)
		orders, err := ops.ParseFilter(ops.FilterSpec{Topic: "orders"}, now)
		if err != nil {
			t.Fatal(err)
		}
		timeout, err := ops.ParseFilter(ops.FilterSpec{Error: "TIMEOUT"}, now)
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name     string
			state    outbox.EntryState
			f        ops.Filter
			after    string
			limit    int
			want     []string
			wantNext string
		}{
			{"DueFirstPage", outbox.StateDue, ops.Filter{}, "", 2, []string{"d1", "d2"}, "d2"},
			{"DueLastPage", outbox.StateDue, ops.Filter{}, "d2", 2, []string{"d3"}, ""},
			{"DueExactlyAPage", outbox.StateDue, ops.Filter{}, "d1", 2, []string{"d2", "d3"}, ""},
			{"DueFiltered", outbox.StateDue, orders, "", 5, []string{"d1", "d3"}, ""},
			{"Scheduled", outbox.StateScheduled, ops.Filter{}, "", 5, []string{"s1"}, ""},
			{"Retrying", outbox.StateRetrying, timeout, "", 5, []string{"r1"}, ""},
			{"Parked", outbox.StateParked, ops.Filter{}, "", 5, []string{"p1"}, ""},
			{"NoneMatch", outbox.StateParked, timeout, "", 5, []string{}, ""},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				got, next, err := ops.Entries(ctx, o, tc.state, tc.f, tc.after, tc.limit)
				if err != nil {
					t.Fatal(err)
				}
				if ids := infoIDs(got); !slices.Equal(ids, tc.want) || next != tc.wantNext {
					t.Errorf("Entries(%s, after %q, limit %d) = %q, next %q; want %q, next %q", tc.state, tc.after, tc.limit, ids, next, tc.want, tc.wantNext)
				}
			})
		}
		t.Run("LimitNotPositive", func(t *testing.T) {
			t.Parallel()
			if _, _, err := ops.Entries(ctx, o, outbox.StateDue, ops.Filter{}, "", 0); err == nil {
				t.Error("Entries with limit 0: no error")
			}
		})
	})
}

func TestBlocked(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s store) {
		o := asOperator(t, s)
		ctx := context.Background()
		now := time.Now()
		var es []outbox.EntryInfo
		for _, id := range []string{"a0", "a1", "a2", "b0", "b1", "c0"} {
			key := "key-" + id[:1]
			es = append(es, outbox.EntryInfo{Entry: outbox.Entry{ID: id, Topic: map[byte]string{'a': "orders", 'b': "payments", 'c': "orders"}[id[0]], Key: key, CreatedAt: now.Add(-time.Hour)}, DueAt: now.Add(-time.Minute)})
		}
		importAll(t, s, es...)
		failHead(t, o, "a0", "relay-1", "first failure")
		time.Sleep(20 * time.Millisecond) // b blocked after a, by the store's clock
		failHead(t, o, "b0", "relay-2", "broker down")

		first, next, err := ops.Blocked(ctx, o, ops.Filter{}, ops.BlockedCursor{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(first) != 1 || first[0].Head.ID != "a0" || first[0].Waiting != 2 || next != ops.CursorOf(first[0]) {
			t.Fatalf("Blocked page 1 = %+v, next %+v; want a0 with 2 waiting, next after it", first, next)
		}
		if h := first[0].Head.History; len(h) != 1 || h[0].Owner != "relay-1" || h[0].Error != "first failure" {
			t.Errorf("a0's history = %+v; want the one attempt by relay-1", h)
		}
		// The cursor survives its text form, as a front end passes it on.
		cur, err := ops.ParseBlockedCursor(next.String())
		if err != nil {
			t.Fatal(err)
		}
		second, next2, err := ops.Blocked(ctx, o, ops.Filter{}, cur, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(second) != 1 || second[0].Head.ID != "b0" || second[0].Waiting != 1 || !next2.IsZero() {
			t.Fatalf("Blocked page 2 = %+v, next %+v; want b0 with 1 waiting, the last page", second, next2)
		}
		payments, err := ops.ParseFilter(ops.FilterSpec{Topic: "payments"}, now)
		if err != nil {
			t.Fatal(err)
		}
		only, _, err := ops.Blocked(ctx, o, payments, ops.BlockedCursor{}, 10)
		if err != nil || len(only) != 1 || only[0].Head.ID != "b0" {
			t.Errorf("Blocked(topic payments) = %+v, %v; want b0 only", only, err)
		}
	})
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s store) {
		o := asOperator(t, s)
		ctx := context.Background()
		for _, target := range []ops.PauseTarget{{Topic: "orders"}, {Partition: 1}} {
			c, err := ops.Pause(ctx, o, target)
			if err != nil || !c.Changed || c.Since.IsZero() {
				t.Fatalf("Pause(%v) = %+v, %v; want changed, with a since", target, c, err)
			}
			if ok, since := ops.PausedSince(c.Paused, target); !ok || !since.Equal(c.Since) {
				t.Fatalf("Pause(%v): Paused %+v does not hold it since %v", target, c.Paused, c.Since)
			}
			again, err := ops.Pause(ctx, o, target)
			if err != nil || again.Changed || !again.Since.Equal(c.Since) {
				t.Errorf("Pause(%v) again = %+v, %v; want unchanged, since kept (%v)", target, again, err, c.Since)
			}
		}
		both, err := o.Paused(ctx)
		if err != nil || len(both.Topics) != 1 || len(both.Partitions) != 1 {
			t.Fatalf("Paused = %+v, %v; want the topic and the partition", both, err)
		}
		for _, target := range []ops.PauseTarget{{Topic: "orders"}, {Partition: 1}} {
			_, since := ops.PausedSince(both, target)
			c, err := ops.Resume(ctx, o, target)
			if err != nil || !c.Changed || !c.Since.Equal(since) {
				t.Errorf("Resume(%v) = %+v, %v; want changed, paused since %v", target, c, err, since)
			}
			if ok, _ := ops.PausedSince(c.Paused, target); ok {
				t.Errorf("Resume(%v): still paused: %+v", target, c.Paused)
			}
			again, err := ops.Resume(ctx, o, target)
			if err != nil || again.Changed || !again.Since.IsZero() {
				t.Errorf("Resume(%v) again = %+v, %v; want unchanged", target, again, err)
			}
		}
		if p, err := o.Paused(ctx); err != nil || !p.Empty() {
			t.Errorf("after resuming both, Paused = %+v, %v", p, err)
		}
	})
}

func TestLoadFleet(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s store) {
		o := asOperator(t, s)
		ctx := context.Background()
		started := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		if _, err := o.Heartbeat(ctx, outbox.Member{Owner: "relay-a", Partitions: []int{0}, Host: "host-a", Version: "v1.2.3", Started: started}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := o.Heartbeat(ctx, outbox.Member{Owner: "relay-b", Host: "host-b", Version: "v1.2.4", Started: started}, time.Minute); err != nil {
			t.Fatal(err)
		}
		lease, err := o.AcquireLease(ctx, 0, "relay-a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = o.ReleaseLease(context.Background(), lease) })
		// A pending entry on each partition: partition 1 has no holder.
		var es []outbox.EntryInfo
		for i := 0; len(es) < 2; i++ {
			key := "k" + string(rune('a'+i))
			if outbox.PartitionOf(key, 2) == len(es) {
				es = append(es, outbox.EntryInfo{Entry: outbox.Entry{ID: "f-" + key, Topic: "orders", Key: key, CreatedAt: time.Now()}, DueAt: time.Now()})
			}
		}
		importAll(t, s, es...)

		f, err := ops.LoadFleet(ctx, o, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Relays) != 2 || f.Relays[0].Member.Owner != "relay-a" || f.Relays[1].Member.Owner != "relay-b" {
			t.Fatalf("Relays = %+v; want relay-a and relay-b", f.Relays)
		}
		a := f.Relays[0]
		if !a.Listed || !slices.Equal(a.Held, []int{0}) || a.Member.Host != "host-a" || a.Member.Version != "v1.2.3" ||
			!a.Member.Started.Equal(started) || a.Member.Renewed.IsZero() {
			t.Errorf("relay-a = %+v; want listed, holding partition 0, with its host, version, start and last heartbeat", a)
		}
		if b := f.Relays[1]; !b.Listed || len(b.Held) != 0 {
			t.Errorf("relay-b = %+v; want listed, holding nothing", b)
		}
		if len(f.Unheld) != 1 || f.Unheld[0].Partition != 1 || f.Unheld[0].Pending != 1 {
			t.Errorf("Unheld = %+v; want partition 1 with its pending entry", f.Unheld)
		}
	})
}
