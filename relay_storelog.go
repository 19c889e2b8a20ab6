package outbox

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// storeOp is a kind of store call whose failures the relay summarises.
type storeOp int

const (
	opAcquire         storeOp = iota // AcquireLease (with the release and re-acquire after it)
	opRenew                          // RenewLease, between batches and during a publish
	opReleaseLease                   // ReleaseLease when a partition is given up
	opFetch                          // FindPendingBatch, FetchBatch, FetchNext
	opRecord                         // MarkSent, MarkFailed (after mark's retries)
	opReleaseClaims                  // Release of untried entries
	opHeartbeat                      // Membership.Heartbeat
	opLeave                          // Membership.Leave
	opStats                          // Inspector.Stats for the outbox gauges
	opSubscribe                      // Notifier.Notifications
	opPauses                         // Pauser.Paused
	opMaintainArchive                // ArchiveJanitor.MaintainArchive of a retention round
	opPurgeArchive                   // ArchiveJanitor.PurgeArchiveBatch of a retention round
	opPurgeParked                    // ParkedPurger.PurgeParked of a retention round
	opArchiveAge                     // ArchiveJanitor.OldestArchived for MetricArchiveOldestAge
	opHealth                         // HealthChecker.Health
	numStoreOps
)

// storeOps names each kind in the logs: the "op" attribute, what the
// relay was doing, and what a failure means (in the line that opens an
// outage).
var storeOps = [numStoreOps]struct{ name, doing, meaning string }{
	opAcquire:         {"acquire", "acquiring a lease", ""},
	opRenew:           {"renew", "renewing a lease", ""},
	opReleaseLease:    {"release_lease", "releasing a lease", "; it will expire"},
	opFetch:           {"fetch", "fetching a batch", ""},
	opRecord:          {"record", "recording outcomes", "; abandoning the lease so its entries come back"},
	opReleaseClaims:   {"release_claims", "releasing untried entries", "; they come back when the lease changes hands"},
	opHeartbeat:       {"heartbeat", "recording the relay's heartbeat", "; keeping the partitions it holds"},
	opLeave:           {"leave", "deleting the relay's heartbeat record", "; it expires after LeaseTTL"},
	opStats:           {"stats", "sampling the outbox's stats", "; the outbox gauges go stale"},
	opSubscribe:       {"subscribe", "subscribing to notifications", "; polling meanwhile"},
	opPauses:          {"pauses", "reading the paused topics and partitions", "; keeping the last known pauses until it works again"},
	opMaintainArchive: {"maintain_archive", "preparing the archive (MaintainArchive)", "; the retention round ends and the next one retries"},
	opPurgeArchive:    {"purge_archive", "removing old archived entries", "; the retention round ends and the next one retries"},
	opPurgeParked:     {"purge_parked", "removing old parked entries", "; the retention round ends and the next one retries"},
	opArchiveAge:      {"archive_age", "reading the archive's oldest entry", "; the archive age gauge goes stale"},
	opHealth:          {"health", "reading the store's health", "; the store health gauges go stale and its warnings stay as last read"},
}

// noPartition is the partition of the store calls made for the relay as a
// whole (heartbeat, leave, stats, subscribe).
const noPartition = -1

// defaultStoreLogEvery is how often a lasting store failure is summarised.
const defaultStoreLogEvery = 30 * time.Second

// storeLog summarises a relay's store failures by kind of call, relay-wide,
// as the publish failures are: a WARN when a kind starts failing (with the
// error and the partition), while it fails at most one WARN per interval
// with the failures and partitions since the last line, and an INFO when
// it works again (how long it failed, how many failures in all). A relay
// whose store is down for a minute logs a few lines per kind, not one per
// call and partition.
//
// A kind works again when a call of it succeeds and no other partition
// has failed it within the interval: in a partial outage (a Redis Cluster
// node down, so only its partitions fail) the kind stays failing while
// the failing partitions keep failing, instead of opening and closing at
// every call. A failure of a call that began before the kind's last
// recovery is a straggler of that outage (a call that hung while the store
// came back): it is logged at Debug and opens no new one. Errors while the
// relay stops (its context ended) are not failures: see failed.
//
// Safe for concurrent use; ok costs one atomic load while nothing fails.
type storeLog struct {
	// every is how often a lasting failure is summarised
	// (defaultStoreLogEvery); set before the relay starts.
	every time.Duration
	now   func() time.Time
	log   *slog.Logger

	failing atomic.Int32 // kinds in an outage now
	mu      sync.Mutex
	outages [numStoreOps]outage
}

// outage is the state of one kind of store call.
type outage struct {
	active   bool
	since    time.Time // the first failure
	lastLine time.Time // the last WARN
	total    int       // failures since the outage began
	count    int       // failures since the last WARN
	parts    map[int]bool
	lastErr  error
	// recent maps each partition that failed to its last failure, while
	// active.
	recent map[int]time.Time
	// ended is when the last outage of this kind ended.
	ended time.Time
}

func newStoreLog(log *slog.Logger, now func() time.Time) *storeLog {
	return &storeLog{every: defaultStoreLogEvery, now: now, log: log}
}

// failed records that a call of kind op on partition (noPartition for the
// relay's own calls), begun at began, failed with err. When ctx has ended
// (the relay is stopping) it is not a failure: it is logged at Debug
// only.
func (s *storeLog) failed(ctx context.Context, op storeOp, partition int, began time.Time, err error) {
	k := storeOps[op]
	if ctx.Err() != nil {
		s.log.Debug("outbox relay: "+k.doing+" failed while stopping", "op", k.name, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	o := &s.outages[op]
	if !o.active {
		if !o.ended.IsZero() && !began.After(o.ended) {
			s.log.Debug("outbox relay: "+k.doing+" failed in a call begun before it worked again", "op", k.name, "err", err)
			return
		}
		*o = outage{active: true, since: now, lastLine: now, total: 1, parts: map[int]bool{},
			recent: map[int]time.Time{partition: now}, lastErr: err}
		s.failing.Add(1)
		s.log.Warn("outbox relay: "+k.doing+" failed"+k.meaning, withPartition([]any{"op", k.name}, partition, "err", err)...)
		return
	}
	o.total++
	o.count++
	o.lastErr = err
	o.recent[partition] = now
	if partition != noPartition {
		o.parts[partition] = true
	}
	if now.Sub(o.lastLine) < s.every {
		return
	}
	args := []any{"op", k.name, "failures", o.count}
	if len(o.parts) > 0 {
		args = append(args, "partitions", len(o.parts))
	}
	s.log.Warn("outbox relay: "+k.doing+" is still failing", append(args, "failing_for", now.Sub(o.since).Round(time.Millisecond), "err", err)...)
	o.lastLine, o.count, o.parts = now, 0, map[int]bool{}
}

// ok records that a call of kind op on partition succeeded (or that the
// store answered, as with ErrLeaseLost or ErrLeaseHeld).
func (s *storeLog) ok(op storeOp, partition int) {
	if s.failing.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := &s.outages[op]
	if !o.active {
		return
	}
	now := s.now()
	delete(o.recent, partition)
	for p, at := range o.recent {
		if now.Sub(at) >= s.every { // no longer tried, or tried by another relay now
			delete(o.recent, p)
		}
	}
	if len(o.recent) > 0 {
		return
	}
	k := storeOps[op]
	s.log.Info("outbox relay: "+k.doing+" works again", "op", k.name,
		"failed_for", now.Sub(o.since).Round(time.Millisecond), "failures", o.total)
	*o = outage{ended: now}
	s.failing.Add(-1)
}

// withPartition is args with the partition when there is one, then rest.
func withPartition(args []any, partition int, rest ...any) []any {
	if partition != noPartition {
		args = append(args, "partition", partition)
	}
	return append(args, rest...)
}
