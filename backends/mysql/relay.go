package mysqloutbox

import "context"

// relayState is the state of fetching and recording outcomes.
type relayState struct{}

// initRelay prepares fetching and recording outcomes.
func (b *Backend) initRelay(ctx context.Context) error { return nil }
