package mysqloutbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// TestMembershipStoresTheRecord checks every field Heartbeat stores, the
// host cut at 255 bytes on a character boundary, and the server's expiry.
func TestMembershipStoresTheRecord(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{Partitions: 8})
	ctx := context.Background()
	started := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	longHost := strings.Repeat("é", 200) // 400 bytes
	ms, err := b.Heartbeat(ctx, outbox.Member{Owner: "b", Partitions: []int{5, 1, 3}, MaxPartitions: 4, Host: longHost, Version: "v1", Started: started}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("members %+v", ms)
	}
	m := ms[0]
	if m.Owner != "b" || !slices.Equal(m.Partitions, []int{1, 3, 5}) || m.MaxPartitions != 4 || m.Version != "v1" || !m.Started.Equal(started) {
		t.Fatalf("member %+v", m)
	}
	if len(m.Host) > 255 || len(m.Host) < 254 || !utf8.ValidString(m.Host) || !strings.HasPrefix(longHost, m.Host) {
		t.Fatalf("host cut to %d bytes (valid UTF-8 %v); want the longest prefix of at most 255 bytes", len(m.Host), utf8.ValidString(m.Host))
	}
	if d := time.Until(m.Expires); d < 50*time.Second || d > 70*time.Second || m.Renewed.IsZero() {
		t.Fatalf("Expires in %v, Renewed %v", d, m.Renewed)
	}
	listed, err := b.Members(ctx)
	if err != nil || len(listed) != 1 || !slices.Equal(listed[0].Partitions, m.Partitions) || listed[0].Host != m.Host {
		t.Fatalf("Members: %+v, %v; want %+v", listed, err, m)
	}
}

// TestMembershipHeartbeatReplacesTheRecord: the next heartbeat replaces
// every field, an unknown start time included.
func TestMembershipHeartbeatReplacesTheRecord(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{Partitions: 8})
	ctx := context.Background()
	first, err := b.Heartbeat(ctx, outbox.Member{Owner: "b", Partitions: []int{1, 2}, MaxPartitions: 3, Host: "h1", Version: "v1", Started: time.Now()}, time.Minute)
	if err != nil || len(first) != 1 {
		t.Fatalf("Heartbeat: %+v, %v", first, err)
	}
	m := first[0]
	ms, err := b.Heartbeat(ctx, outbox.Member{Owner: "b", Partitions: []int{7}, Host: "h2", Version: "v2"}, 2*time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("second Heartbeat: %+v, %v", ms, err)
	}
	if n := ms[0]; !slices.Equal(n.Partitions, []int{7}) || n.MaxPartitions != 0 || n.Host != "h2" || n.Version != "v2" || !n.Started.IsZero() || !n.Expires.After(m.Expires) {
		t.Fatalf("after the second heartbeat: %+v; want every field replaced", n)
	}
}

// TestMembershipExpiryOrderAndLeave: expired records drop out, the list
// is in byte order, Leave deletes at once and twice is a no-op.
func TestMembershipExpiryOrderAndLeave(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{Partitions: 8})
	ctx := context.Background()
	heartbeat := func(owner string, ttl time.Duration, want string) {
		t.Helper()
		ms, err := b.Heartbeat(ctx, outbox.Member{Owner: owner, Partitions: []int{0}}, ttl)
		if err != nil || owners(ms) != want {
			t.Fatalf("Heartbeat(%s): %s, %v; want %s", owner, owners(ms), err, want)
		}
	}
	heartbeat("b", time.Minute, "b")
	heartbeat("B-short", 50*time.Millisecond, "B-short,b")
	heartbeat("a", time.Minute, "B-short,a,b")
	time.Sleep(100 * time.Millisecond)
	if listed, err := b.Members(ctx); err != nil || owners(listed) != "a,b" {
		t.Fatalf("Members after one expired: %s, %v", owners(listed), err)
	}
	heartbeat("a", time.Minute, "a,b") // deletes the expired record
	for range 2 {
		if err := b.Leave(ctx, "b"); err != nil {
			t.Fatal(err)
		}
	}
	if listed, err := b.Members(ctx); err != nil || owners(listed) != "a" {
		t.Fatalf("after Leave: %s, %v", owners(listed), err)
	}
	b.Close()
	if _, err := b.Members(ctx); !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Members after Close: %v", err)
	}
}

func TestMembershipRejectsBadArguments(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{Partitions: 8})
	for _, bad := range []outbox.Member{{Owner: ""}, {Owner: "x", Partitions: []int{8}}, {Owner: "x", MaxPartitions: -1}, {Owner: strings.Repeat("x", 256)}, {Owner: "\xff"}} {
		if _, err := b.Heartbeat(context.Background(), bad, time.Minute); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Fatalf("Heartbeat(%+v): %v; want ErrInvalidArgument", bad, err)
		}
	}
}

func owners(ms []outbox.Member) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.Owner
	}
	return strings.Join(s, ",")
}
