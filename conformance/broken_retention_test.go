package conformance_test

import (
	"cmp"
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/conformance"
	"github.com/outboxrelay/outbox/internal/brokentest"
)

// The retention cases (ArchiveJanitor, ParkedPurger, HealthChecker and the
// relay's Retention) are proven on retentionStore: the memory backend
// with a simulated archive (MarkSent records what it removes, with the
// time) and a simulated Health, since the memory backend keeps no archive
// and has no tables. Its variant "none" breaks nothing
// (TestSimulatedRetention requires every retention case to pass on it,
// with the memory backend's own PurgeParked); the others break one
// contract each, and TestSuiteRejectsBrokenRetention requires the named
// cases to fail on them. The children run in TestBrokenRetentionChild.

// brokenRetentionEnv names the variant a TestBrokenRetentionChild
// subprocess runs.
const brokenRetentionEnv = "OUTBOX_CONFORMANCE_BROKEN_RETENTION"

var retentionVariants = []variant{
	{"archive-purge-ignores-horizon", "PurgeArchiveBatch removes archived entries sent after before too", []string{"ArchiveJanitor/PurgeRemovesArchivedBeforeHorizon", "ArchiveJanitor/PurgeOldestFirst"}},
	{"archive-purge-ignores-limit", "PurgeArchiveBatch removes every old entry whatever the limit", []string{"ArchiveJanitor/PurgeBoundedWithMore", "ArchiveJanitor/PurgeOldestFirst"}},
	{"archive-purge-no-more", "PurgeArchiveBatch always reports more false", []string{"ArchiveJanitor/PurgeBoundedWithMore"}},
	{"archive-purge-newest-first", "PurgeArchiveBatch removes the newest old entries first", []string{"ArchiveJanitor/PurgeOldestFirst"}},
	{"archive-oldest-is-newest", "OldestArchived reports the newest archived entry", []string{"ArchiveJanitor/PurgeOldestFirst"}},
	{"archive-purge-takes-pending", "PurgeArchiveBatch also removes pending entries", []string{"ArchiveJanitor/PurgeRemovesArchivedBeforeHorizon"}},
	{"archive-not-kept", "MarkSent archives nothing (as a harness that ignores Config.Archive)", []string{"ArchiveJanitor/PurgeRemovesArchivedBeforeHorizon", "ArchiveJanitor/MaintainIdempotent"}},
	{"maintain-not-idempotent", "MaintainArchive fails when called a second time", []string{"ArchiveJanitor/MaintainIdempotent"}},
	{"purge-parked-takes-pending", "PurgeParked also removes pending entries", []string{"ParkedPurger/RemovesOnlyParked"}},
	{"purge-parked-keeps", "PurgeParked returns the IDs but removes nothing", []string{"ParkedPurger/RemovesOnlyParked", "Retention/ParkedRemovedOnceByHolderOfPartition0"}},
	{"purge-parked-ignores-limit", "PurgeParked removes every old parked entry whatever the limit", []string{"ParkedPurger/LimitMoreAndOldestFirst"}},
	{"purge-parked-no-more", "PurgeParked always reports more false", []string{"ParkedPurger/LimitMoreAndOldestFirst"}},
	{"purge-parked-newest-first", "PurgeParked removes the newest parked entries first", []string{"ParkedPurger/LimitMoreAndOldestFirst"}},
	{"purge-parked-ignores-horizon", "PurgeParked removes entries parked after before too", []string{"ParkedPurger/HorizonRespected", "ParkedPurger/RequeuedNotRemoved"}},
	{"purge-parked-takes-requeued", "PurgeParked also removes entries that were parked and have been requeued", []string{"ParkedPurger/RequeuedNotRemoved"}},
	{"purge-parked-first-park-time", "an entry parked again after a requeue keeps its first park time", []string{"ParkedPurger/RequeuedNotRemoved"}},
	{"health-empty-code", "Health reports a warning without a Code", []string{"HealthChecker/Reports"}},
	{"health-unnamed-table", "Health reports a table without a name", []string{"HealthChecker/Reports"}},
}

// retentionStore is the memory backend with a simulated archive and
// Health, broken as its variant says. Its optional interfaces but those it
// defines are promoted from the embedded backend.
type retentionStore struct {
	*memory.Backend
	variant string
	archive bool // Config.Archive

	mu           sync.Mutex
	archived     map[string]time.Time // simulated archive: ID -> sent time
	maintained   int
	parkedAt     map[string]time.Time // the purge-parked-* variants' park times
	healthCalled int
}

var (
	_ outbox.ArchiveJanitor = (*retentionStore)(nil)
	_ outbox.ParkedPurger   = (*retentionStore)(nil)
	_ outbox.HealthChecker  = (*retentionStore)(nil)
)

func (r *retentionStore) MarkSent(ctx context.Context, lease outbox.Lease, ids []string) error {
	var known []string
	for _, id := range ids {
		if info, err := r.Lookup(ctx, id); err == nil && info.Partition == lease.Partition {
			known = append(known, id)
		}
	}
	if err := r.Backend.MarkSent(ctx, lease, ids); err != nil {
		return err
	}
	if !r.archive || r.variant == "archive-not-kept" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, id := range known {
		r.archived[id] = now
	}
	return nil
}

func (r *retentionStore) MaintainArchive(ctx context.Context, _ time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maintained++
	if r.variant == "maintain-not-idempotent" && r.maintained > 1 {
		return errors.New("simulated archive: the partitions exist already")
	}
	return nil
}

// sentItem is one simulated archived entry.
type sentItem struct {
	id string
	at time.Time
}

func (r *retentionStore) PurgeArchiveBatch(ctx context.Context, before time.Time, limit int) (int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	if r.variant == "archive-purge-takes-pending" {
		r.cancelPending(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var old []sentItem
	for id, at := range r.archived {
		if at.Before(before) || r.variant == "archive-purge-ignores-horizon" {
			old = append(old, sentItem{id, at})
		}
	}
	slices.SortFunc(old, func(a, b sentItem) int { return a.at.Compare(b.at) })
	if r.variant == "archive-purge-newest-first" {
		slices.Reverse(old)
	}
	n := min(limit, len(old))
	if r.variant == "archive-purge-ignores-limit" {
		n = len(old)
	}
	for _, it := range old[:n] {
		delete(r.archived, it.id)
	}
	more := n < len(old) && r.variant != "archive-purge-no-more"
	return int64(n), more, nil
}

func (r *retentionStore) OldestArchived(ctx context.Context) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var at time.Time
	for _, t := range r.archived {
		newer := r.variant == "archive-oldest-is-newest"
		if at.IsZero() || (t.Before(at) != newer) {
			at = t
		}
	}
	return at, !at.IsZero(), nil
}

// cancelPending cancels every entry that is not parked.
func (r *retentionStore) cancelPending(ctx context.Context) {
	for _, st := range outbox.EntryStates {
		if st == outbox.StateParked {
			continue
		}
		infos, _ := r.Entries(ctx, st, outbox.ListFilter{}, "", 1000)
		for _, info := range infos {
			_ = r.Cancel(ctx, info.ID)
		}
	}
}

func (r *retentionStore) MarkFailed(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) error {
	if err := r.Backend.MarkFailed(ctx, lease, failures); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range failures {
		if _, ok := r.parkedAt[f.ID]; f.Park && (!ok || r.variant != "purge-parked-first-park-time") {
			r.parkedAt[f.ID] = time.Now()
		}
	}
	return nil
}

func (r *retentionStore) PurgeParked(ctx context.Context, before time.Time, limit int) ([]string, bool, error) {
	if r.variant == "none" || r.variant == "" || !r.breaksParked() {
		return r.Backend.PurgeParked(ctx, before, limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if r.variant == "purge-parked-takes-pending" {
		r.cancelPending(ctx)
	}
	r.mu.Lock()
	var old []sentItem
	for id, at := range r.parkedAt {
		info, err := r.Lookup(ctx, id)
		if err != nil || (!info.Parked && r.variant != "purge-parked-takes-requeued") {
			continue
		}
		if at.Before(before) || r.variant == "purge-parked-ignores-horizon" {
			old = append(old, sentItem{id, at})
		}
	}
	r.mu.Unlock()
	slices.SortFunc(old, func(a, b sentItem) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.id, b.id)) })
	if r.variant == "purge-parked-newest-first" {
		slices.Reverse(old)
	}
	n := min(limit, len(old))
	if r.variant == "purge-parked-ignores-limit" {
		n = len(old)
	}
	var ids []string
	for _, it := range old[:n] {
		if r.variant != "purge-parked-keeps" {
			if err := r.Cancel(ctx, it.id); err != nil {
				return ids, false, err
			}
		}
		ids = append(ids, it.id)
	}
	return ids, n < len(old) && r.variant != "purge-parked-no-more", nil
}

// breaksParked reports whether the variant breaks PurgeParked (the others
// use the memory backend's own).
func (r *retentionStore) breaksParked() bool {
	switch r.variant {
	case "purge-parked-takes-pending", "purge-parked-keeps", "purge-parked-ignores-limit", "purge-parked-no-more",
		"purge-parked-newest-first", "purge-parked-ignores-horizon", "purge-parked-takes-requeued", "purge-parked-first-park-time":
		return true
	}
	return false
}

func (r *retentionStore) Health(ctx context.Context) (outbox.Health, error) {
	if err := ctx.Err(); err != nil {
		return outbox.Health{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.healthCalled++
	h := outbox.Health{Tables: []outbox.TableHealth{{Name: "simulated.outbox", Bytes: 8192, LiveRows: 0, DeadRows: 0, Vacuums: -1}}}
	switch r.variant {
	case "health-empty-code":
		h.Warnings = []outbox.HealthWarning{{Message: "the simulated table is not vacuumed"}}
	case "health-unnamed-table":
		h.Tables[0].Name = ""
	}
	return h, nil
}

// TestBrokenRetentionChild runs the retention cases against the
// retentionStore variant named by OUTBOX_CONFORMANCE_BROKEN_RETENTION. It
// is the subprocess of TestSuiteRejectsBrokenRetention and
// TestSimulatedRetention.
func TestBrokenRetentionChild(t *testing.T) {
	name := os.Getenv(brokenRetentionEnv)
	if name == "" {
		t.Skip("runs only as a subprocess of TestSuiteRejectsBrokenRetention or TestSimulatedRetention, with " + brokenRetentionEnv + " set")
	}
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[*memory.Tx] {
		b := memory.New(memory.Options{Partitions: cfg.Partitions})
		t.Cleanup(func() { _ = b.Close() })
		w := &retentionStore{Backend: b, variant: name, archive: cfg.Archive, archived: map[string]time.Time{}, parkedAt: map[string]time.Time{}}
		return memoryHarness{b: w, begin: b.Begin}
	})
}

func TestSuiteRejectsBrokenRetention(t *testing.T) {
	if os.Getenv(brokenRetentionEnv) != "" || os.Getenv(brokenEnv) != "" {
		t.Skip("inside a child subprocess")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	children := brokentest.Children{Exe: exe, Test: "TestBrokenRetentionChild", Env: brokenRetentionEnv, Slots: 4 * runtime.NumCPU()}
	children.Reject(t, "broken retention variant → the subtests of conformance.Run that pin its contract, as they failed on it", toCheck(retentionVariants))
}

// TestSimulatedRetention runs the retention cases on retentionStore with
// the variant "none" (in a TestBrokenRetentionChild subprocess) and
// requires every one of them to run and pass: they must not fail a
// backend that keeps the contracts.
func TestSimulatedRetention(t *testing.T) {
	if os.Getenv(brokenRetentionEnv) != "" || os.Getenv(brokenEnv) != "" {
		t.Skip("inside a child subprocess")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	children := brokentest.Children{Exe: exe, Test: "TestBrokenRetentionChild", Env: brokenRetentionEnv}
	areas := []string{"ArchiveJanitor", "ParkedPurger", "HealthChecker", "Retention"}
	out, err := children.Run(t.Context(), "none", areas)
	if err != nil {
		t.Fatalf("the retention cases failed on the simulated store, which keeps the contracts (%v):\n%s", err, brokentest.Tail(string(out), 60))
	}
	for _, area := range areas {
		prefix := "TestBrokenRetentionChild/" + area + "/"
		if strings.Contains(string(out), "--- SKIP: "+prefix) || !strings.Contains(string(out), "--- PASS: "+prefix) {
			t.Fatalf("the %s cases must run and pass on the simulated store, not skip:\n%s", area, brokentest.Tail(string(out), 60))
		}
	}
}
