package cli

import (
	"strconv"

	"github.com/alecthomas/kong"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// DefaultVars are the kong variables that the flags of the relay's (and
// the move's) options take their defaults from: the library's defaults,
// read instead of restated (default:"${lease_ttl}").
func DefaultVars() kong.Vars {
	return kong.Vars{
		"batch":               strconv.Itoa(outbox.DefaultBatchSize),
		"max_in_flight":       strconv.Itoa(outbox.DefaultMaxInFlight),
		"poll_interval":       outbox.DefaultPollInterval.String(),
		"mysql_poll_interval": mysqloutbox.DefaultPollInterval.String(),
		"lease_ttl":           outbox.DefaultLeaseTTL.String(),
		"stats_interval":      outbox.DefaultStatsInterval.String(),
		"retention_interval":  outbox.DefaultRetentionInterval.String(),
		"retention_batch":     strconv.Itoa(outbox.DefaultRetentionBatch),
		"retention_pause":     outbox.DefaultRetentionPause.String(),
		"health_interval":     outbox.DefaultHealthInterval.String(),
	}
}
