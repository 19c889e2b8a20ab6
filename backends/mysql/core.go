package mysqloutbox

import "context"

// coreState is the state of the appends and the relay-facing half.
type coreState struct{}

// initCore prepares the appends and the relay-facing half.
func (b *Backend) initCore(ctx context.Context) error { return nil }

// closeCore releases what initCore made.
func (b *Backend) closeCore() {}
