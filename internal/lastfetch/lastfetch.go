// Package lastfetch remembers, per partition, what a backend learned about
// the entries its last two fetches returned (where they are stored), keyed
// by entry ID and tied to the lease the fetches ran under, so that
// finishing those entries under the same lease can skip looking them up
// again. Two, because a relay finishes a batch after it claimed the next
// one when the store is an [outbox.Prefetcher].
// What it holds is a hint: the backends check it against the store.
package lastfetch

import (
	"sync"

	"github.com/outboxrelay/outbox"
)

// Cache holds one partition's last two fetches. The zero value is empty
// and ready; it is safe for concurrent use.
type Cache[V any] struct {
	mu      sync.Mutex
	owner   string
	version int64
	// byID is what the last fetch learned, prev what the one before it
	// did (nil when that one ran under another lease).
	byID, prev map[string]V
}

// Remember records byID, learned by a fetch under lease, as the last
// fetch; the last one becomes the one before it when it ran under the same
// lease, and is forgotten otherwise, as is the one before it.
func (c *Cache[V]) Remember(lease outbox.Lease, byID map[string]V) {
	c.mu.Lock()
	if c.owner == lease.Owner && c.version == lease.Version {
		c.prev = c.byID
	} else {
		c.prev = nil
	}
	c.owner, c.version, c.byID = lease.Owner, lease.Version, byID
	c.mu.Unlock()
}

// Each calls fn for every ID of ids, in order, with what the last two
// fetches under lease learned of it (the last one first) and whether they
// learned anything (always false when they ran under another lease).
func (c *Cache[V]) Each(lease outbox.Lease, ids []string, fn func(id string, v V, ok bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	known := c.owner == lease.Owner && c.version == lease.Version
	for _, id := range ids {
		var v V
		ok := false
		if known {
			if v, ok = c.byID[id]; !ok {
				v, ok = c.prev[id]
			}
		}
		fn(id, v, ok)
	}
}
