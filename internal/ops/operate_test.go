package ops_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/ops"
)

func TestParseState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want outbox.EntryState
	}{
		{"due", outbox.StateDue}, {"Scheduled", outbox.StateScheduled}, {" retrying ", outbox.StateRetrying}, {"PARKED", outbox.StateParked},
	} {
		if got, err := ops.ParseState(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseState(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "pending", "dues"} {
		_, err := ops.ParseState(bad)
		var fe *ops.FieldError
		if !errors.As(err, &fe) || fe.Field != ops.FieldState || !strings.Contains(err.Error(), "due, scheduled, retrying, parked") {
			t.Errorf("ParseState(%q): %v; want a FieldError for state that lists the states", bad, err)
		}
	}
}

func TestFilterListFilter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	f, err := ops.ParseFilter(ops.FilterSpec{Topic: "orders", Key: "k1", Error: "TimeOut", Since: "2h", Until: "2026-05-11"}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := outbox.ListFilter{Topic: "orders", Key: "k1", Error: "TimeOut", Since: now.Add(-2 * time.Hour), Until: time.Date(2026, 5, 11, 0, 0, 0, 0, time.UTC)}
	if got := f.ListFilter(); !reflect.DeepEqual(got, want) {
		t.Errorf("ListFilter() = %+v; want %+v", got, want)
	}
	if got := (ops.Filter{}).ListFilter(); !reflect.DeepEqual(got, outbox.ListFilter{}) {
		t.Errorf("the zero Filter's ListFilter() = %+v; want the zero ListFilter", got)
	}
}

func TestBlockedCursor(t *testing.T) {
	t.Parallel()
	c := ops.BlockedCursor{Since: time.Date(2026, 5, 10, 12, 0, 0, 123456789, time.FixedZone("x", 3600)), HeadID: "a/b c"}
	back, err := ops.ParseBlockedCursor(c.String())
	if err != nil || !back.Since.Equal(c.Since) || back.HeadID != c.HeadID {
		t.Errorf("ParseBlockedCursor(%q) = %+v, %v; want %+v", c.String(), back, err, c)
	}
	if z, err := ops.ParseBlockedCursor(""); err != nil || !z.IsZero() || (ops.BlockedCursor{}).String() != "" {
		t.Errorf(`ParseBlockedCursor("") = %+v, %v; want the zero cursor, whose String is ""`, z, err)
	}
	for _, bad := range []string{"e1", "yesterday/e1", "2026-05-10T12:00:00Z/", "2026-05-10T12:00:00Z"} {
		_, err := ops.ParseBlockedCursor(bad)
		var fe *ops.FieldError
		if !errors.As(err, &fe) || fe.Field != ops.FieldAfter || !strings.Contains(err.Error(), "previous page") {
			t.Errorf("ParseBlockedCursor(%q): %v; want a FieldError for after that says what to pass", bad, err)
		}
	}
}

func TestParsePauseTarget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    ops.PauseSpec
		want    ops.PauseTarget
		err     error  // a sentinel, or nil
		field   string // a FieldError's field, or ""
		errText string
	}{
		{name: "Topic", spec: ops.PauseSpec{Topic: "orders"}, want: ops.PauseTarget{Topic: "orders"}},
		{name: "Partition", spec: ops.PauseSpec{Partition: "2"}, want: ops.PauseTarget{Partition: 2}},
		{name: "PartitionZero", spec: ops.PauseSpec{Partition: "0"}, want: ops.PauseTarget{Partition: 0}},
		{name: "Neither", spec: ops.PauseSpec{}, err: ops.ErrNoTarget},
		{name: "Both", spec: ops.PauseSpec{Topic: "orders", Partition: "1"}, err: ops.ErrTwoTargets},
		{name: "PartitionTooHigh", spec: ops.PauseSpec{Partition: "3"}, field: ops.FieldPartition, errText: "3 is out of range: the outbox has partitions 0 to 2"},
		{name: "PartitionNegative", spec: ops.PauseSpec{Partition: "-1"}, field: ops.FieldPartition, errText: "-1 is out of range"},
		{name: "PartitionNotANumber", spec: ops.PauseSpec{Partition: "two"}, field: ops.FieldPartition, errText: `"two" is not a partition number: write a number from 0 to 2`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ops.ParsePauseTarget(tc.spec, 3)
			var fe *ops.FieldError
			switch {
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Errorf("ParsePauseTarget(%+v): %v; want %v", tc.spec, err, tc.err)
				}
			case tc.field != "":
				if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.errText) {
					t.Errorf("ParsePauseTarget(%+v): %v; want a FieldError for %s containing %q", tc.spec, err, tc.field, tc.errText)
				}
			case err != nil || got != tc.want:
				t.Errorf("ParsePauseTarget(%+v) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
			}
		})
	}
	if s := (ops.PauseTarget{Topic: "orders"}).String(); s != `topic "orders"` {
		t.Errorf("String() = %q", s)
	}
	if s := (ops.PauseTarget{Partition: 4}).String(); s != "partition 4" {
		t.Errorf("String() = %q", s)
	}
}

func TestPausedSince(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	p := outbox.Paused{Topics: []outbox.PausedTopic{{Topic: "orders", Since: at}}, Partitions: []outbox.PausedPartition{{Partition: 0, Since: at.Add(time.Minute)}}}
	for _, tc := range []struct {
		t     ops.PauseTarget
		want  bool
		since time.Time
	}{
		{ops.PauseTarget{Topic: "orders"}, true, at},
		{ops.PauseTarget{Topic: "payments"}, false, time.Time{}},
		{ops.PauseTarget{Partition: 0}, true, at.Add(time.Minute)},
		{ops.PauseTarget{Partition: 1}, false, time.Time{}},
	} {
		if got, since := ops.PausedSince(p, tc.t); got != tc.want || !since.Equal(tc.since) {
			t.Errorf("PausedSince(%v) = %v, %v; want %v, %v", tc.t, got, since, tc.want, tc.since)
		}
	}
}

func TestJoinFleet(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	members := []outbox.Member{
		{Owner: "relay-a", Partitions: []int{0, 3}, Host: "h1", Version: "v1", Started: at, Renewed: at.Add(time.Minute)},
		{Owner: "relay-c", Host: "h2"},
	}
	lease := func(owner string) outbox.Lease { return outbox.Lease{Owner: owner, Version: 1, Expires: at} }
	parts := []outbox.PartitionStats{
		{Partition: 0, Lease: lease("relay-a"), Stats: outbox.Stats{Pending: 1}},
		{Partition: 1, Stats: outbox.Stats{Pending: 4, Due: 2}}, // unheld, pending
		{Partition: 2}, // unheld, empty
		{Partition: 3, Lease: lease("relay-a")},
		{Partition: 4, Lease: lease("relay-b")},                    // a holder without a record
		{Partition: 5, Stats: outbox.Stats{Pending: 1, Parked: 3}}, // unheld, a scheduled entry
		{Partition: 6, Stats: outbox.Stats{Parked: 2}},             // unheld, parked only
	}
	f := ops.JoinFleet(members, parts)
	type row struct {
		owner, host string
		listed      bool
		held        []int
	}
	var got []row
	for _, r := range f.Relays {
		got = append(got, row{r.Member.Owner, r.Member.Host, r.Listed, r.Held})
	}
	want := []row{{"relay-a", "h1", true, []int{0, 3}}, {"relay-b", "", false, []int{4}}, {"relay-c", "h2", true, nil}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Relays = %+v; want %+v", got, want)
	}
	var unheld []int
	for _, p := range f.Unheld {
		unheld = append(unheld, p.Partition)
	}
	if !reflect.DeepEqual(unheld, []int{1, 5}) || len(f.Partitions) != len(parts) {
		t.Errorf("Unheld = %v (of %d partitions); want [1 5], the unheld partitions with pending entries", unheld, len(f.Partitions))
	}
	if !f.Relays[0].Member.Renewed.Equal(at.Add(time.Minute)) {
		t.Errorf("the member's record is not kept whole: %+v", f.Relays[0].Member)
	}
	if empty := ops.JoinFleet(nil, nil); len(empty.Relays) != 0 || len(empty.Unheld) != 0 {
		t.Errorf("JoinFleet(nil, nil) = %+v", empty)
	}
}
