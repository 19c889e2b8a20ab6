package move

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxrelay/outbox"
)

// DefaultOwner is the lease owner of a move when [Options.Owner] is empty.
// It is fixed, so a move that was killed and is run again retakes the
// source partitions its predecessor still held without waiting for their
// leases to expire.
const DefaultOwner = "outbox-move"

// Defaults of [Options]. The lease TTL is the relay's
// ([outbox.DefaultLeaseTTL]): a move's leases are the relay's leases.
const (
	DefaultLeaseTTL     = outbox.DefaultLeaseTTL
	DefaultBatch        = 500
	DefaultWorkers      = 4
	DefaultPollInterval = time.Second
)

// Options configure [Prepare], [Run], [Inspect], [Release] and [Unseal].
// The zero value is ready to use; each field's doc gives its default.
type Options struct {
	// SourceName names the source in the destination's hold reason, which
	// Run and Release check, so give the same name to every step of one
	// move. It must not hold a password. `outbox move` uses the source's
	// store URL without its user info, and the outbox's name in it.
	// Default: "unnamed source".
	SourceName string
	// Owner is the lease owner the mover takes the source partitions as.
	// Default: [DefaultOwner].
	Owner string
	// LeaseTTL is the time-to-live of the mover's leases on the source
	// partitions; the mover renews a lease once half of it is gone.
	// Default: [DefaultLeaseTTL].
	LeaseTTL time.Duration
	// Batch is how many entries one ExportBatch and one Import carry.
	// Default: [DefaultBatch].
	Batch int
	// Workers is how many source partitions are moved at once. Default:
	// [DefaultWorkers].
	Workers int
	// PollInterval is how often Run tries again to take a source
	// partition whose lease another owner holds. Default:
	// [DefaultPollInterval].
	PollInterval time.Duration
	// Progress, when set, is called after each batch and while Run waits
	// for a lease, one call at a time (never concurrently). It must not
	// block for long. Default: nil.
	Progress func(Progress)
	// Logger gets what Run does at INFO (the seal, each partition done,
	// the release) and the leases it waits for at WARN. Default: a logger
	// that discards.
	Logger *slog.Logger

	// afterImport is a test hook (set through export_test.go only): called
	// after each Import, before RemoveExported; an error stops Run there.
	afterImport func(partition int, ids []string) error
}

func (o Options) withDefaults() (Options, error) {
	if o.SourceName == "" {
		o.SourceName = "unnamed source"
	}
	if o.Owner == "" {
		o.Owner = DefaultOwner
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.LeaseTTL < 0:
		return o, fmt.Errorf("move: Options.LeaseTTL is %v: use 0 (the default, %v) or a positive duration", o.LeaseTTL, DefaultLeaseTTL)
	case o.Batch < 0:
		return o, fmt.Errorf("move: Options.Batch is %d: use 0 (the default, %d) or a positive count", o.Batch, DefaultBatch)
	case o.Workers < 0:
		return o, fmt.Errorf("move: Options.Workers is %d: use 0 (the default, %d) or a positive count", o.Workers, DefaultWorkers)
	case o.PollInterval < 0:
		return o, fmt.Errorf("move: Options.PollInterval is %v: use 0 (the default) or a positive duration", o.PollInterval)
	}
	return o, nil
}
