package lastfetch_test

import (
	"fmt"
	"testing"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/lastfetch"
)

func TestCacheAnswersOnlyUnderItsLease(t *testing.T) {
	t.Parallel()
	var c lastfetch.Cache[int]
	l := outbox.Lease{Owner: "a", Version: 3}
	got := func(lease outbox.Lease) map[string]int {
		out := map[string]int{}
		c.Each(lease, []string{"v", "w", "x", "y", "z"}, func(id string, v int, ok bool) {
			if ok {
				out[id] = v
			}
		})
		return out
	}
	if n := len(got(l)); n != 0 {
		t.Fatalf("an empty cache knew %d IDs", n)
	}
	c.Remember(l, map[string]int{"x": 1, "z": 3})
	if g := got(l); len(g) != 2 || g["x"] != 1 || g["z"] != 3 {
		t.Fatalf("under its lease: %v, want x=1 z=3", g)
	}
	for _, other := range []outbox.Lease{{Owner: "a", Version: 4}, {Owner: "b", Version: 3}} {
		if g := got(other); len(g) != 0 {
			t.Fatalf("under lease %+v: %v, want nothing", other, g)
		}
	}
	c.Remember(l, map[string]int{"y": 2, "z": 4})
	if g := got(l); len(g) != 3 || g["x"] != 1 || g["y"] != 2 || g["z"] != 4 {
		t.Fatalf("after a second fetch: %v, want x=1 (the fetch before) y=2 z=4 (the last fetch first)", g)
	}
	c.Remember(l, nil)
	if g := got(l); len(g) != 2 || g["y"] != 2 || g["z"] != 4 {
		t.Fatalf("after a third fetch that found nothing: %v, want the second fetch's y=2 z=4 only", g)
	}
	c.Remember(outbox.Lease{Owner: "a", Version: 4}, map[string]int{"w": 5})
	c.Remember(l, map[string]int{"v": 6})
	if g := got(l); len(g) != 1 || g["v"] != 6 {
		t.Fatalf("after fetches under another lease and back: %v, want only v=6", g)
	}
}

func ExampleCache() {
	var c lastfetch.Cache[string]
	lease := outbox.Lease{Partition: 0, Owner: "relay-1", Version: 7}
	c.Remember(lease, map[string]string{"id-1": "where id-1 is"})
	c.Each(lease, []string{"id-1", "id-2"}, func(id, where string, ok bool) {
		fmt.Println(id, ok)
	})
	// Output:
	// id-1 true
	// id-2 false
}
