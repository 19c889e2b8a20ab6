package pgoutbox

import "sync"

// claims remembers, per partition, which entries the current lease was
// handed and has not finished yet, so FindPendingBatch does not hand them
// to the same lease again. It is process memory only: the database never
// records a claim (the partition lease is the claim), so a restart or
// another Backend instance simply sees them again, which the SPI allows.
// Finishing calls forget their IDs whatever the database answered, so an
// entry can never get stuck behind a failed call.
type claims struct {
	mu   sync.Mutex
	byPt map[int]*claimSet
}

type claimSet struct {
	owner   string
	version int64
	ids     map[string]struct{}
}

// held returns the IDs lease holds unfinished.
func (c *claims) held(p int, owner string, version int64) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.byPt[p]
	if s == nil || s.owner != owner || s.version != version {
		return []string{}
	}
	out := make([]string, 0, len(s.ids))
	for id := range s.ids {
		out = append(out, id)
	}
	return out
}

// add records ids as handed to the lease, replacing the claims of any
// other lease of the partition (it has ended).
func (c *claims) add(p int, owner string, version int64, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byPt == nil {
		c.byPt = map[int]*claimSet{}
	}
	s := c.byPt[p]
	if s == nil || s.owner != owner || s.version != version {
		if len(ids) == 0 {
			delete(c.byPt, p)
			return
		}
		s = &claimSet{owner: owner, version: version, ids: map[string]struct{}{}}
		c.byPt[p] = s
	}
	for _, id := range ids {
		s.ids[id] = struct{}{}
	}
}

// done forgets ids of the lease.
func (c *claims) done(p int, owner string, version int64, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.byPt[p]
	if s == nil || s.owner != owner || s.version != version {
		return
	}
	for _, id := range ids {
		delete(s.ids, id)
	}
	if len(s.ids) == 0 {
		delete(c.byPt, p)
	}
}

// drop forgets every claim of the lease (it ended).
func (c *claims) drop(p int, owner string, version int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.byPt[p]; s != nil && s.owner == owner && s.version == version {
		delete(c.byPt, p)
	}
}
