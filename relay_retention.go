package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
)

// Retention: the relay's janitor removes archived entries older than
// RelayOptions.ArchiveRetention through the store's [ArchiveJanitor], and
// parked entries older than RelayOptions.ParkedRetention through its
// [ParkedPurger]. One relay of a fleet does it at a time: the one whose
// worker of partition 0 holds that partition's lease with trust left. No
// second lock or lease is taken; when partition 0 changes hands mid-round
// the old holder stops before its next call.

// maxRemovedIDsLogged is how many IDs one WARN line of removed parked
// entries lists; the rest are counted ("and N more").
const maxRemovedIDsLogged = 20

// janitor runs the retention rounds of one relay.
type janitor struct {
	// archive is the store as an ArchiveJanitor, nil when it is not one.
	archive ArchiveJanitor
	// parked is the store as a ParkedPurger when ParkedRetention > 0, else
	// nil.
	parked           ParkedPurger
	archiveRetention time.Duration
	parkedRetention  time.Duration
	interval         time.Duration // RetentionInterval
	pause            time.Duration // RetentionPause
	batch            int           // RetentionBatch
	now              func() time.Time
	log              *slog.Logger
	stores           *storeLog
	counts           *relayCounts
	metrics          *relayMetrics
	// holder is the relay's worker of partition 0, nil when the relay does
	// not serve partition 0 (then it never runs a round).
	holder *worker
}

// newJanitor returns the janitor of a relay over store with the options o
// (defaults applied), or nil when there is nothing to run: the store is
// not an ArchiveJanitor and ParkedRetention is not set. holder is the
// relay's worker of partition 0 (nil when it does not serve it).
func newJanitor(store Store, o RelayOptions, holder *worker) *janitor {
	j := &janitor{
		archiveRetention: o.ArchiveRetention,
		parkedRetention:  o.ParkedRetention,
		interval:         o.RetentionInterval,
		pause:            o.RetentionPause,
		batch:            o.RetentionBatch,
		now:              o.Now,
		holder:           holder,
	}
	j.archive, _ = store.(ArchiveJanitor)
	if o.ParkedRetention > 0 {
		j.parked, _ = store.(ParkedPurger)
	}
	if j.archive == nil && j.parked == nil {
		return nil
	}
	return j
}

// retentionProblems checks the retention options o (as given) against
// store: a retention the store cannot serve is an error.
func retentionProblems(store Store, o RelayOptions) []OptionProblem {
	var ps []OptionProblem
	if _, ok := store.(ArchiveJanitor); !ok && o.ArchiveRetention > 0 {
		ps = append(ps, problem("{ArchiveRetention} is %v, but the store keeps no archive (it does not implement outbox.ArchiveJanitor): sent entries are deleted, not archived; set the backend's Archive option (pgoutbox.Options.Archive, mysqloutbox.Options.Archive) or leave {ArchiveRetention} 0", o.ArchiveRetention))
	}
	if _, ok := store.(ParkedPurger); !ok && o.ParkedRetention > 0 {
		ps = append(ps, problem("{ParkedRetention} is %v, but the store cannot remove parked entries (it does not implement outbox.ParkedPurger); leave {ParkedRetention} 0 and requeue or cancel parked entries by hand", o.ParkedRetention))
	}
	return ps
}

// removable lists the kinds of entries the janitor may remove, for the
// MetricRetentionRemoved series exported at zero.
func (j *janitor) removable() []string {
	var kinds []string
	if j.archive != nil && j.archiveRetention > 0 {
		kinds = append(kinds, removedArchived)
	}
	if j.parked != nil {
		kinds = append(kinds, removedParked)
	}
	return kinds
}

// The kinds of MetricRetentionRemoved ("kind" attribute).
const (
	removedArchived = "archived"
	removedParked   = "parked"
)

// announce logs, once when the relay starts, what the janitor will do: a
// WARN that parked entries will be removed, and an INFO when the relay
// never runs rounds because it does not serve partition 0.
func (j *janitor) announce() {
	if j.parked != nil {
		j.log.Warn(fmt.Sprintf("outbox relay: parked entries older than %v will be removed for good (RelayOptions.ParkedRetention): a parked entry was never delivered; each removal is logged at WARN with the IDs removed", j.parkedRetention),
			"parked_retention", j.parkedRetention)
	}
	if j.holder == nil {
		j.log.Info("outbox relay: this relay does not serve partition 0 (RelayOptions.Partitions), so it never runs retention rounds: the relay that holds partition 0 does")
	}
}

// run runs a round every RetentionInterval (give or take a tenth, so the
// relays of a fleet do not all look at once) while the relay holds
// partition 0, until ctx ends; callCtx is the context of the store calls
// (the relay's hard stop).
func (j *janitor) run(ctx, callCtx context.Context) {
	if j.holder == nil {
		return
	}
	for sleep(ctx, jittered(j.interval)) {
		if j.holder.holdsTrusted() {
			j.round(ctx, callCtx)
		}
	}
}

// jittered is d give or take a tenth, at random.
func jittered(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}

// round runs one retention round: MaintainArchive, then the archive purge
// while it reports more (with ArchiveRetention), then the parked purge
// likewise (with ParkedRetention). Between two calls it pauses the longer
// of RetentionPause and the last call's duration, and it stops as soon as
// the relay is stopping, no longer holds partition 0, or a call fails (the
// failure is logged with the relay's other store failures; the next round
// retries).
func (j *janitor) round(ctx, callCtx context.Context) {
	j.counts.retentionRounds.Add(1)
	p := &pacer{j: j, ctx: ctx}
	now := j.now()
	if j.archive != nil {
		if !p.call(callCtx, opMaintainArchive, func(c context.Context) error { return j.archive.MaintainArchive(c, now) }) {
			return
		}
		if j.archiveRetention > 0 && !j.purgeArchive(callCtx, p, now.Add(-j.archiveRetention)) {
			return
		}
	}
	if j.parked != nil {
		j.purgeParked(callCtx, p, now.Add(-j.parkedRetention))
	}
}

// purgeArchive calls PurgeArchiveBatch while it reports more; it reports
// whether the round may go on.
func (j *janitor) purgeArchive(ctx context.Context, p *pacer, before time.Time) bool {
	for more := true; more; {
		var removed int64
		if !p.call(ctx, opPurgeArchive, func(c context.Context) (err error) {
			removed, more, err = j.archive.PurgeArchiveBatch(c, before, j.batch)
			return err
		}) {
			return false
		}
		if removed > 0 {
			j.counts.archivedRemoved.Add(removed)
			j.metrics.retentionRemoved(removedArchived, removed)
			j.log.Debug("outbox relay: removed archived entries", "removed", removed, "sent_before", before)
		}
	}
	return true
}

// purgeParked calls PurgeParked while it reports more, logging every
// removal at WARN with the IDs; it reports whether the round may go on.
func (j *janitor) purgeParked(ctx context.Context, p *pacer, before time.Time) bool {
	for more := true; more; {
		var ids []string
		if !p.call(ctx, opPurgeParked, func(c context.Context) (err error) {
			ids, more, err = j.parked.PurgeParked(c, before, j.batch)
			return err
		}) {
			return false
		}
		if len(ids) == 0 {
			continue
		}
		n := int64(len(ids))
		j.counts.parkedRemoved.Add(n)
		j.metrics.retentionRemoved(removedParked, n)
		args := []any{"removed", len(ids), "parked_before", before, "ids", strings.Join(ids[:min(len(ids), maxRemovedIDsLogged)], ",")}
		if len(ids) > maxRemovedIDsLogged {
			args = append(args, "and_more", len(ids)-maxRemovedIDsLogged)
		}
		j.log.Warn("outbox relay: removed parked entries for good (RelayOptions.ParkedRetention); they were never delivered", args...)
	}
	return true
}

// pacer spaces the store calls of one round and checks, before each, that
// the round may go on.
type pacer struct {
	j     *janitor
	ctx   context.Context // the relay's run context: its end stops the round
	calls int
	last  time.Duration // how long the last call took
}

// call makes one store call of the round, of kind op: it first pauses (after the
// round's first call) and checks that the relay is not stopping and still
// holds partition 0; it reports whether the call was made and succeeded.
func (p *pacer) call(ctx context.Context, op storeOp, f func(context.Context) error) bool {
	j := p.j
	if p.calls > 0 && !sleep(p.ctx, max(j.pause, p.last)) {
		return false
	}
	if p.ctx.Err() != nil || !j.holder.holdsTrusted() {
		return false
	}
	p.calls++
	began := j.now()
	err := f(ctx)
	p.last = j.now().Sub(began)
	if err != nil {
		j.stores.failed(ctx, op, noPartition, began, err)
		return false
	}
	j.stores.ok(op, noPartition)
	return true
}
