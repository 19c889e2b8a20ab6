package mysqloutbox

import "context"

// opsState is the state of the operator and move interfaces.
type opsState struct{}

// initOps prepares the operator and move interfaces.
func (b *Backend) initOps(ctx context.Context) error { return nil }
