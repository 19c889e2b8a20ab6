package mysqloutbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// The tests of this file check that topics and owners that differ only
// by trailing spaces are different topics and owners, as they are in Go:
// a PAD SPACE collation (utf8mb4_bin) would compare them equal.

func pausedTopics(t *testing.T, b *mysqloutbox.Backend) []string {
	t.Helper()
	p, err := b.Paused(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, pt := range p.Topics {
		out = append(out, pt.Topic)
	}
	return out
}

func TestTrailingSpaceTopicIsAnotherTopic(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db,
		row{id: "plain", key: "k1", topic: "orders", due: -time.Second},
		row{id: "spaced", key: "k2", topic: "orders ", due: -time.Second},
	)
	l := takeLease(t, db, 0, "me")
	fetch := func(what string, want ...string) {
		t.Helper()
		got, err := b.FindPendingBatch(ctx, l, 10)
		if err != nil {
			t.Fatal(err)
		}
		wantIDs(t, what, got, want...)
		batch, err := b.FetchNext(ctx, l, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantIDs(t, what+" (FetchNext)", batch.Entries, want...)
	}
	if err := b.PauseTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	fetch(`"orders" paused: "orders " still fetched`, "spaced")
	if got := pausedTopics(t, b); !slices.Equal(got, []string{"orders"}) {
		t.Fatalf("paused topics %q, want [orders]", got)
	}
	if err := b.PauseTopic(ctx, "orders "); err != nil {
		t.Fatal(err)
	}
	if got := pausedTopics(t, b); !slices.Equal(got, []string{"orders", "orders "}) {
		t.Fatalf(`paused topics %q after pausing "orders " too, want two`, got)
	}
	fetch("both paused")
	if err := b.ResumeTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	fetch(`"orders" resumed, "orders " still paused`, "plain")
	if got := pausedTopics(t, b); !slices.Equal(got, []string{"orders "}) {
		t.Fatalf("paused topics %q, want [\"orders \"]", got)
	}
	// BlockedKeys lists the keys whose head is of a paused topic: only
	// the "orders " entry's.
	keys, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].Head.ID != "spaced" {
		t.Fatalf(`blocked keys %+v, want only the key of "spaced" (topic "orders ")`, keys)
	}
	for topic, want := range map[string][]string{"orders": {"plain"}, "orders ": {"spaced"}} {
		got, err := b.Entries(ctx, outbox.StateDue, outbox.ListFilter{Topic: topic}, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(entryIDs(got), want) {
			t.Errorf("Entries(topic %q) = %v, want %v", topic, entryIDs(got), want)
		}
	}
}

func TestTrailingSpaceMembersAreTwoRecords(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{Partitions: 4})
	ctx := context.Background()
	if _, err := b.Heartbeat(ctx, outbox.Member{Owner: "r1", Partitions: []int{0}, Host: "a"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	ms, err := b.Heartbeat(ctx, outbox.Member{Owner: "r1 ", Partitions: []int{1}, Host: "b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%q", ownerList(ms)); got != `["r1" "r1 "]` {
		t.Fatalf("members %s after heartbeats of r1 and \"r1 \", want two records", got)
	}
	if ms[0].Host != "a" || ms[1].Host != "b" {
		t.Fatalf("hosts %q %q, want a b (each record its own)", ms[0].Host, ms[1].Host)
	}
	if err := b.Leave(ctx, "r1 "); err != nil {
		t.Fatal(err)
	}
	ms, err = b.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%q", ownerList(ms)); got != `["r1"]` {
		t.Fatalf("members %s after \"r1 \" left, want [r1]", got)
	}
}

func ownerList(ms []outbox.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Owner)
	}
	return out
}

func TestTrailingSpaceOwnerIsAnotherOwner(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db, row{id: "x", due: -time.Second})
	l, err := b.AcquireLease(ctx, 0, "r1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other := l
	other.Owner = "r1 "
	if _, err := b.AcquireLease(ctx, 0, "r1 ", time.Minute); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf(`AcquireLease by "r1 " while r1 holds: %v, want ErrLeaseHeld`, err)
	}
	if _, err := b.RenewLease(ctx, other, time.Minute); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf(`RenewLease as "r1 ": %v, want ErrLeaseLost`, err)
	}
	if _, err := b.FindPendingBatch(ctx, other, 5); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf(`FindPendingBatch as "r1 ": %v, want ErrLeaseLost`, err)
	}
	if _, err := b.FetchNext(ctx, other, 5, nil); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf(`FetchNext as "r1 ": %v, want ErrLeaseLost`, err)
	}
	if _, err := b.ExportBatch(ctx, other, 5); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf(`ExportBatch as "r1 ": %v, want ErrLeaseLost`, err)
	}
	for what, err := range map[string]error{
		"MarkSent":       b.MarkSent(ctx, other, []string{"x"}),
		"MarkFailed":     b.MarkFailed(ctx, other, []outbox.Failure{{ID: "x", Error: "e"}}),
		"Release":        b.Release(ctx, other, []string{"x"}),
		"RemoveExported": b.RemoveExported(ctx, other, []string{"x"}),
	} {
		if !errors.Is(err, outbox.ErrLeaseLost) {
			t.Errorf(`%s as "r1 ": %v, want ErrLeaseLost`, what, err)
		}
	}
	var attempts, n int
	if err := db.QueryRow("SELECT COUNT(*), COALESCE(SUM(attempts), 0) FROM `outbox` WHERE id = 'x'").Scan(&n, &attempts); err != nil || n != 1 || attempts != 0 {
		t.Fatalf(`the entry changed under "r1 ": %d rows, attempts %d, %v`, n, attempts, err)
	}
	if err := b.ReleaseLease(ctx, other); err != nil {
		t.Fatal(err)
	}
	if got, err := b.FindPendingBatch(ctx, l, 5); err != nil || len(got) != 1 {
		t.Fatalf(`r1's lease after a release as "r1 ": %v, %v; want it still held`, ids(got), err)
	}
}

// TestOwnerHolds255FourByteCharacters: the VARBINARY owner columns keep
// the capacity the owner check promises (255 characters of UTF-8, each
// up to 4 bytes), and compare such owners byte for byte too.
func TestOwnerHolds255FourByteCharacters(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	long := strings.Repeat("😀", 255) // 1020 bytes
	ms, err := b.Heartbeat(ctx, outbox.Member{Owner: long, Partitions: []int{0}}, time.Minute)
	if err != nil || len(ms) != 1 || ms[0].Owner != long {
		t.Fatalf("Heartbeat of a 255-character owner: %d members, %v", len(ms), err)
	}
	l, err := b.AcquireLease(ctx, 0, long, time.Minute)
	if err != nil || l.Owner != long {
		t.Fatalf("AcquireLease by a 255-character owner: %v", err)
	}
	if _, err := b.FindPendingBatch(ctx, l, 1); err != nil {
		t.Fatalf("FindPendingBatch under the lease of a 255-character owner: %v", err)
	}
	if _, err := b.Heartbeat(ctx, outbox.Member{Owner: long + "x"}, time.Minute); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("Heartbeat of a 256-character owner: %v, want ErrInvalidArgument", err)
	}
}
