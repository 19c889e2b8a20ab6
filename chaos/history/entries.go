package history

// Entries returns the appended entries in the order they were first
// recorded: those whose commit was confirmed, and those whose outcome
// stayed unknown (never confirmed). It copies them; the History is not
// changed. It is what a check of a consumer's effects (rather than of the
// broker's records) compares against.
func (h *History) Entries() (committed, unknown []Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.entries {
		c := e.Entry
		if c.Partition != nil {
			p := *c.Partition
			c.Partition = &p
		}
		if e.unknown {
			unknown = append(unknown, c)
		} else {
			committed = append(committed, c)
		}
	}
	return committed, unknown
}
