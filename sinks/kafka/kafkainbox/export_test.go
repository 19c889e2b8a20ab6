package kafkainbox

// RebalanceWaiting reports whether kgo signalled that a rebalance waits
// for the poll being handled.
func (c *Consumer[Tx]) RebalanceWaiting() bool { return c.hurry.Load() }

// JanitorsStarted is how many times the Consumer started its janitor
// (Options.Retention), and whether one runs now.
func (c *Consumer[Tx]) JanitorsStarted() (started int, running bool) {
	if c.jan == nil {
		return 0, false
	}
	c.jan.mu.Lock()
	defer c.jan.mu.Unlock()
	return c.jan.started, c.jan.cancel != nil
}
