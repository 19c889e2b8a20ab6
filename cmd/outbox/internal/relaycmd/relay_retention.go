package relaycmd

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
)

// RetentionFlags are the relay's flags for what outlives the drain: the
// archive of sent entries, its retention and that of parked entries, and
// the store's health checks. They map onto pgoutbox.Options.Archive and
// mysqloutbox.Options.Archive (--archive) and onto outbox.RelayOptions
// (the others).
//
// --archive-retention needs --archive: a relay that does not archive
// would remove what other processes archive, which is `outbox purge`'s
// job; the error says so.
type RetentionFlags struct {
	Archive           bool          `name:"archive" group:"Retention" help:"Keep each sent entry in the outbox's archive table (<table>_archive; Postgres and MySQL) instead of deleting it. Without --archive-retention the archive keeps growing until 'outbox purge' removes old entries. Refused for a Redis store, which has no archive."`
	ArchiveRetention  cli.Days      `name:"archive-retention" placeholder:"DURATION" group:"Retention" help:"Remove archived entries sent more than DURATION ago: days (7d, 1.5d) or Go's form (36h). One relay of the fleet at a time (the holder of partition 0) removes them every --retention-interval, --retention-batch rows per short transaction, pausing between batches. Needs --archive. Default: 0, keep them."`
	ParkedRetention   cli.Days      `name:"parked-retention" placeholder:"DURATION" group:"Retention" help:"DELETES PARKED ENTRIES FOR GOOD: entries parked more than DURATION ago (7d, 36h), which were never delivered, are removed in the retention rounds, each removal logged at WARN with the entries' IDs. Default: 0, parked entries stay until requeued or cancelled."`
	RetentionInterval time.Duration `name:"retention-interval" default:"${retention_interval}" placeholder:"DURATION" group:"Retention" help:"How often the relay holding partition 0 runs a retention round (and, for an archive partitioned by day, creates the coming days' partitions). Default: ${default}."`
	RetentionBatch    int           `name:"retention-batch" default:"${retention_batch}" placeholder:"N" group:"Retention" help:"Most entries one removal takes, in one short transaction. Default: ${default}."`
	RetentionPause    time.Duration `name:"retention-pause" default:"${retention_pause}" placeholder:"DURATION" group:"Retention" help:"Least pause between two removals of a round; the pause is also at least as long as the last removal took, so retention uses at most half of one store connection's time. Default: ${default}."`
	HealthInterval    time.Duration `name:"health-interval" default:"${health_interval}" placeholder:"DURATION" group:"Retention" help:"How often the relay reads the store's health (its tables' size and dead rows, Redis memory) for the outbox_store_* metrics, logging each warning (autovacuum off, an old transaction holding vacuum back, memory fragmentation) once at WARN. Negative: no checks. Default: ${default}."`
}

// retentionProblems checks the retention flags, for validate: their
// bounds, --archive-retention without --archive, and an archive asked of
// a Redis store.
func (c *RelayCmd) retentionProblems() []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	t, err := cli.ParseStore(c.Store)
	switch redis := err == nil && t.Kind == "redis"; {
	case redis && (c.Archive || c.ArchiveRetention > 0):
		flag := "--archive"
		if c.ArchiveRetention > 0 {
			flag = "--archive-retention"
		}
		bad("%s: %s; leave --archive and --archive-retention off for a Redis store (--parked-retention works on it)", flag, cli.RedisNoArchive)
	case c.ArchiveRetention > 0 && !c.Archive:
		bad("--archive-retention %s needs --archive: this relay removes old entries from the archive it fills; add --archive (or, to trim an archive other processes fill, run 'outbox purge --before %s' on a schedule)", c.ArchiveRetention, c.ArchiveRetention)
	}
	if c.RetentionInterval <= 0 {
		bad("--retention-interval must be positive (it is %v)", c.RetentionInterval)
	}
	if c.RetentionBatch <= 0 {
		bad("--retention-batch must be positive (it is %d)", c.RetentionBatch)
	}
	if c.RetentionPause <= 0 {
		bad("--retention-pause must be positive (it is %v)", c.RetentionPause)
	}
	if c.HealthInterval == 0 {
		bad("--health-interval must not be 0: give an interval, or a negative one to turn the health checks off")
	}
	return errs
}

// logRetention says at start what the relay does with sent and parked
// entries: a WARN when --archive keeps every sent entry with no
// retention, an INFO naming the retention when there is one (the library
// logs --parked-retention's own WARN).
func (c *RelayCmd) logRetention(log *slog.Logger, opened *cli.Opened) {
	switch {
	case c.Archive && c.ArchiveRetention == 0:
		log.Warn("outbox relay: --archive keeps every sent entry in the archive until it is removed by hand: give --archive-retention (such as 7d), or run 'outbox purge --before 7d' on a schedule",
			"outbox", opened.Outbox)
	case c.ArchiveRetention > 0:
		log.Info("outbox relay: archived entries are removed once older than --archive-retention, by the relay of the fleet that holds partition 0",
			"outbox", opened.Outbox, "archive_retention", c.ArchiveRetention.String(), "retention_interval", c.RetentionInterval.String(), "retention_batch", c.RetentionBatch)
	}
}
