package admincmd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/internal/ops"
)

// narrowStore is a store with the Inspector and Canceler of a backend but
// none of its other optional interfaces, as a minimal conforming backend
// would have.
type narrowStore struct {
	outbox.Store
	outbox.Inspector
	outbox.Canceler
}

// TestAdminOnANarrowBackend: without PartitionInspector and Looker the
// commands still work from what the backend has, and say what they lack.
func TestAdminOnANarrowBackend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := memory.New(memory.Options{Partitions: 2})
	clitest.SeedAdmin(t, mem, func(e ...outbox.Entry) error { return mem.Append(ctx, e...) })
	narrow := narrowStore{Store: mem, Inspector: mem, Canceler: mem}
	o := &cli.Opened{Store: narrow, Kind: "memory", Outbox: "memory"}
	var out, errs strings.Builder
	app := &cli.App{Stdout: &out, Stderr: &errs}

	if err := (&StatusCmd{}).report(ctx, app, o, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "all        3        2    3") || !strings.Contains(out.String(), "does not implement outbox.PartitionInspector") {
		t.Fatalf("status:\n%s", out.String())
	}
	out.Reset()
	if err := (&StatusCmd{OutputFlags: cli.OutputFlags{Output: "json"}}).report(ctx, app, o, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"paused": null`) || !strings.Contains(out.String(), `"by_partition": null`) {
		t.Fatalf("status -o json without a Pauser and a PartitionInspector:\n%s", out.String())
	}
	if err := (&ShowCmd{ID: "e0"}).show(ctx, app, o); err == nil || !strings.Contains(err.Error(), "does not implement outbox.Looker") {
		t.Fatalf("show without a Looker: %v", err)
	}
	if err := (&EntriesCmd{ListFlags: ListFlags{Limit: 10}}).list(ctx, app, o, outbox.StateDue, ops.Filter{}); err == nil ||
		!strings.Contains(err.Error(), "this backend (admincmd.narrowStore) does not implement outbox.Lister, which entries needs") {
		t.Fatalf("entries without a Lister: %v", err)
	}
	if err := (&BlockedCmd{ListFlags: ListFlags{Limit: 10}}).list(ctx, app, o, ops.Filter{}, ops.BlockedCursor{}); err == nil ||
		!strings.Contains(err.Error(), "does not implement outbox.Lister, which blocked needs") {
		t.Fatalf("blocked without a Lister: %v", err)
	}
	if err := (TargetFlags{Topic: "orders"}).apply(ctx, app, o, true); err == nil || !strings.Contains(err.Error(), "does not implement outbox.Pauser, which pause needs") {
		t.Fatalf("pause without a Pauser: %v", err)
	}
	if err := (TargetFlags{Partition: "1"}).apply(ctx, app, o, false); err == nil || !strings.Contains(err.Error(), "does not implement outbox.Pauser, which resume needs") {
		t.Fatalf("resume without a Pauser: %v", err)
	}
	if err := (&RelaysCmd{}).show(ctx, app, o); err == nil || !strings.Contains(err.Error(), "does not implement outbox.MemberLister, which relays needs") {
		t.Fatalf("relays without a MemberLister: %v", err)
	}
	out.Reset()
	sel := selection{ids: []string{"e1", "e0"}}
	if err := (&RequeueCmd{SelectFlags: SelectFlags{Batch: 10}}).requeue(ctx, app, o, sel); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "e1: requeued, or not parked (1 of this batch of 2 were requeued; this backend") || !strings.HasSuffix(out.String(), "requeued 1 entries\n") {
		t.Fatalf("requeue without a Looker:\n%s", out.String())
	}
}

// TestBulkProgress: long bulk work draws a progress bar on stderr when it
// is a terminal, and never otherwise; the per-ID results (with -v) go to
// stdout.
func TestBulkProgress(t *testing.T) {
	t.Parallel()
	for _, tty := range []bool{false, true} {
		t.Run(fmt.Sprint("terminal=", tty), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			mem := memory.New(memory.Options{})
			var entries []outbox.Entry
			for i := range cli.ProgressMin + 50 {
				entries = append(entries, outbox.Entry{ID: fmt.Sprintf("p%04d", i), Topic: "t", Key: fmt.Sprint(i)})
			}
			if err := mem.Append(ctx, entries...); err != nil {
				t.Fatal(err)
			}
			lease, err := mem.AcquireLease(ctx, 0, "o", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			batch, err := mem.FindPendingBatch(ctx, lease, len(entries))
			if err != nil {
				t.Fatal(err)
			}
			var fails []outbox.Failure
			for _, e := range batch {
				fails = append(fails, outbox.Failure{ID: e.ID, Error: "x", Park: true})
			}
			if err := mem.MarkFailed(ctx, lease, fails); err != nil {
				t.Fatal(err)
			}
			var out, errs strings.Builder
			app := &cli.App{Stdout: &out, Stderr: &errs, StderrTerminal: tty}
			o := &cli.Opened{Store: mem, Kind: "memory", Outbox: "memory"}
			// -v: past 20 entries the per-ID lines are printed only when asked for.
			c := &RequeueCmd{SelectFlags: SelectFlags{All: true, Yes: true, Verbose: true, Batch: 50}}
			if err := c.requeue(ctx, app, o, selection{all: true}); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(out.String(), ": requeued\n"); n != len(entries) || !strings.HasSuffix(out.String(), fmt.Sprintf("requeued %d entries\n", len(entries))) {
				t.Fatalf("stdout has %d result lines:\n%.500s", n, out.String())
			}
			if drawn := strings.Contains(errs.String(), fmt.Sprintf("%d/%d", len(entries), len(entries))); drawn != tty {
				t.Fatalf("progress bar drawn = %v with a terminal = %v; stderr:\n%q", drawn, tty, errs.String())
			}
		})
	}
}
