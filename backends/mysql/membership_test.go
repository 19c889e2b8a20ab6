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

func TestMembership(t *testing.T) {
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
	if len(m.Host) > 255 || !utf8.ValidString(m.Host) || !strings.HasPrefix(longHost, m.Host) || len(m.Host) < 254 {
		t.Fatalf("host cut to %d bytes (valid UTF-8 %v); want the longest prefix of at most 255 bytes", len(m.Host), utf8.ValidString(m.Host))
	}
	if d := time.Until(m.Expires); d < 50*time.Second || d > 70*time.Second || m.Renewed.IsZero() {
		t.Fatalf("Expires in %v, Renewed %v", d, m.Renewed)
	}
	// A short-lived member expires; a live one is listed; the list is in
	// byte order.
	if _, err := b.Heartbeat(ctx, outbox.Member{Owner: "B-short", Partitions: nil}, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ms, err = b.Heartbeat(ctx, outbox.Member{Owner: "a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := owners(ms); got != "B-short,a,b" {
		t.Fatalf("members %s; want B-short,a,b", got)
	}
	time.Sleep(100 * time.Millisecond)
	listed, err := b.Members(ctx)
	if err != nil || owners(listed) != "a,b" {
		t.Fatalf("Members after one expired: %s, %v", owners(listed), err)
	}
	if ms, err = b.Heartbeat(ctx, outbox.Member{Owner: "a", Partitions: []int{0}}, time.Minute); err != nil || owners(ms) != "a,b" {
		t.Fatalf("Heartbeat: %s, %v", owners(ms), err)
	}
	if err := b.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := b.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if listed, err = b.Members(ctx); err != nil || owners(listed) != "a" || !slices.Equal(listed[0].Partitions, []int{0}) {
		t.Fatalf("after Leave: %+v, %v", listed, err)
	}
	for _, bad := range []outbox.Member{{Owner: ""}, {Owner: "x", Partitions: []int{8}}, {Owner: "x", MaxPartitions: -1}, {Owner: strings.Repeat("x", 256)}} {
		if _, err := b.Heartbeat(ctx, bad, time.Minute); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Fatalf("Heartbeat(%+v): %v; want ErrInvalidArgument", bad, err)
		}
	}
	b.Close()
	if _, err := b.Members(ctx); !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Members after Close: %v", err)
	}
}

func owners(ms []outbox.Member) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.Owner
	}
	return strings.Join(s, ",")
}
