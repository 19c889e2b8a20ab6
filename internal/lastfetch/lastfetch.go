// Package lastfetch remembers, per partition, what a backend learned about
// the entries its last fetch returned (where they are stored), keyed by
// entry ID and tied to the lease the fetch ran under, so that finishing
// those entries under the same lease can skip looking them up again.
// What it holds is a hint: the backends check it against the store.
package lastfetch

import (
	"sync"

	"github.com/outboxrelay/outbox"
)

// Cache holds one partition's last fetch. The zero value is empty and
// ready; it is safe for concurrent use.
type Cache[V any] struct {
	mu      sync.Mutex
	owner   string
	version int64
	byID    map[string]V
}

// Remember replaces what the cache holds with byID, learned under lease.
func (c *Cache[V]) Remember(lease outbox.Lease, byID map[string]V) {
	c.mu.Lock()
	c.owner, c.version, c.byID = lease.Owner, lease.Version, byID
	c.mu.Unlock()
}

// Each calls fn for every ID of ids, in order, with what the last fetch
// under lease learned of it and whether it learned anything (always false
// when the last fetch ran under another lease).
func (c *Cache[V]) Each(lease outbox.Lease, ids []string, fn func(id string, v V, ok bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	known := c.byID != nil && c.owner == lease.Owner && c.version == lease.Version
	for _, id := range ids {
		var v V
		ok := false
		if known {
			v, ok = c.byID[id]
		}
		fn(id, v, ok)
	}
}
