package admincmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/internal/ops"
)

// SelectFlags say which entries requeue and cancel work on, and how.
type SelectFlags struct {
	cli.FilterFlags
	All     bool `noconfig:"" help:"Every parked entry."`
	DryRun  bool `name:"dry-run" noconfig:"" help:"Print what would be changed, one line per entry; change nothing."`
	Yes     bool `noconfig:"" help:"Go ahead with a bulk change without asking (needed when there is no terminal to ask on)."`
	Verbose bool `short:"v" help:"Print a line per entry changed even past 20 entries (by default a bulk change of more prints only the entries it could not change, and a summary)."`
	Batch   int  `default:"500" aliases:"limit" help:"Entries per call on the store."`
}

// selection is what SelectFlags and IDs select.
type selection struct {
	ids []string
	all bool
	f   ops.Filter
}

func (s SelectFlags) parse(ids []string, now time.Time) (selection, error) {
	if s.Batch < 1 {
		return selection{}, cli.UsageError("--batch must be at least 1")
	}
	f, err := s.FilterFlags.Parse(now)
	if err != nil {
		return selection{}, err
	}
	switch {
	case len(ids) > 0 && (s.All || f.Any()):
		return selection{}, cli.UsageError("give entry IDs, filters or --all: one of them, not several")
	case s.All && f.Any():
		return selection{}, cli.UsageError("--all takes no filters: give filters (--topic, --key, --error, --since, --until) to select parked entries, or --all for every one")
	case len(ids) == 0 && !s.All && !f.Any():
		return selection{}, cli.UsageError("say which entries: give entry IDs, filters (--topic, --key, --error, --since, --until) or --all")
	}
	return selection{ids: ops.Dedupe(ids), all: s.All, f: f}, nil
}

// describe says what a filter or --all selection holds, for prompts.
func (sel selection) describe(n int, o *cli.Opened) string {
	if sel.all {
		return fmt.Sprintf("all %d parked entries of %s", n, o.Outbox)
	}
	return fmt.Sprintf("the %d parked entries of %s that match %s", n, o.Outbox, sel.f.Describe())
}

// RequeueCmd moves parked entries back to pending.
type RequeueCmd struct {
	cli.StoreFlags
	SelectFlags
	IDs     []string      `arg:"" optional:"" name:"id" help:"Entry IDs to requeue."`
	Timeout time.Duration `default:"10m" help:"Give up after this long."`
}

// Run requeues.
func (c *RequeueCmd) Run(app *cli.App) error {
	sel, err := c.SelectFlags.parse(c.IDs, time.Now())
	if err != nil {
		return err
	}
	return c.StoreFlags.With(c.Timeout, cli.OpenOptions{}, func(ctx context.Context, o *cli.Opened) error {
		return c.requeue(ctx, app, o, sel)
	})
}

func (c *RequeueCmd) requeue(ctx context.Context, app *cli.App, o *cli.Opened, sel selection) error {
	in, err := inspector(o.Store)
	if err != nil {
		return err
	}
	out := app.Stdout
	todo, err := c.selectParked(ctx, out, in, o, sel)
	if err != nil {
		return err
	}
	ids := ops.IDs(todo)
	if len(ids) == 0 {
		if len(sel.ids) == 0 {
			fmt.Fprintf(out, "no parked entries%s in %s: nothing to requeue\n", matching(sel), o.Outbox)
		} else {
			fmt.Fprintf(out, "requeued 0 entries\n")
		}
		return nil
	}
	if c.DryRun {
		for _, id := range ids {
			fmt.Fprintf(out, "%s: would requeue\n", cli.Cell(id))
		}
		fmt.Fprintf(out, "would requeue %d entries (dry run: nothing changed)\n", len(ids))
		return nil
	}
	if len(sel.ids) == 0 {
		if err := cli.Confirm(app, c.Yes, "requeue "+sel.describe(len(ids), o), true); err != nil {
			return err
		}
	}
	pr := cli.NewProgress(app, len(ids), "requeue")
	pr.Brief(c.Verbose)
	defer pr.Done()
	res, err := ops.Requeue(ctx, in, ids, ops.RequeueOptions{Batch: c.Batch, Progress: func(ch ops.RequeueChunk) {
		printRequeued(pr, ch, o.Store)
		pr.Add(len(ch.IDs))
	}})
	pr.Done()
	if err != nil {
		fmt.Fprintf(out, "requeued %d entries before the error\n", res.Requeued)
		return o.Explain(err)
	}
	fmt.Fprintf(out, "requeued %d entries\n", res.Requeued)
	printLeftOut(out, pr)
	if n := len(res.Refused); n > 0 {
		return fmt.Errorf("%d %s left parked: %s can never be published as stored (see each one's reason above; inspect with outbox show ID, then fix the stored data and requeue again, or cancel)",
			n, plural(n, "entry was", "entries were"), plural(n, "it", "they"))
	}
	return nil
}

// selectParked returns the parked entries sel selects, oldest first. Of
// named IDs, it prints why each one it leaves out is left out; without a
// Looker it cannot tell, and returns them all.
func (c *RequeueCmd) selectParked(ctx context.Context, out io.Writer, in outbox.Inspector, o *cli.Opened, sel selection) ([]outbox.Entry, error) {
	if len(sel.ids) == 0 {
		todo, _, err := ops.Collect(ctx, in, sel.f, ops.CollectOptions{Batch: c.Batch})
		if err != nil {
			return nil, o.Explain(err)
		}
		ops.ByCreation(todo)
		return todo, nil
	}
	lk, ok := o.Store.(outbox.Looker)
	if !ok {
		todo := make([]outbox.Entry, len(sel.ids))
		for i, id := range sel.ids {
			todo[i].ID = id
		}
		return todo, nil
	}
	todo, left, err := ops.CheckParked(ctx, lk, sel.ids)
	for _, l := range left {
		fmt.Fprintf(out, "%s: %s\n", cli.Cell(l.ID), l.Reason)
	}
	if err != nil {
		return nil, o.Explain(err)
	}
	ops.ByCreation(todo)
	return todo, nil
}

// printRequeued prints a line per ID of one requeue call on store: refused
// (and why), requeued, or, when the store requeued fewer than it was
// given, what can be told of which.
func printRequeued(pr *cli.Progress, ch ops.RequeueChunk, store outbox.Store) {
	why := make(map[string]string, len(ch.Refused))
	for _, r := range ch.Refused {
		why[r.ID] = r.Reason
	}
	_, canLook := store.(outbox.Looker)
	for _, id := range ch.IDs {
		if reason, ok := why[id]; ok {
			pr.Line("%s: refused, left parked: %s", cli.Cell(id), cli.Cell(reason))
			continue
		}
		switch {
		case ch.Requeued == len(ch.IDs)-len(why):
			pr.Entry("%s: requeued", cli.Cell(id))
		case canLook:
			pr.Entry("%s: requeued, or no longer parked (%d of this batch of %d were requeued; the others changed state meanwhile)", cli.Cell(id), ch.Requeued, len(ch.IDs))
		default:
			pr.Entry("%s: requeued, or not parked (%d of this batch of %d were requeued; this backend, %T, cannot tell which: it does not implement outbox.Looker)", cli.Cell(id), ch.Requeued, len(ch.IDs), store)
		}
	}
}

// printLeftOut says how many routine per-entry lines pr left out, and how
// to see them.
func printLeftOut(out io.Writer, pr *cli.Progress) {
	if n := pr.LeftOut(); n > 0 {
		fmt.Fprintf(out, "(%d per-entry lines left out: more than %d entries; pass -v to print each one)\n", n, cli.BriefMin-1)
	}
}

// matching is " matching <filter>" for a filter selection.
func matching(sel selection) string {
	if sel.f.Any() {
		return " match " + sel.f.Describe()
	}
	return ""
}

// CancelCmd deletes pending or parked entries.
type CancelCmd struct {
	cli.StoreFlags
	SelectFlags
	IDs     []string      `arg:"" optional:"" name:"id" help:"Entry IDs to cancel (pending or parked)."`
	Timeout time.Duration `default:"10m" help:"Give up after this long."`
}

// Run cancels.
func (c *CancelCmd) Run(app *cli.App) error {
	sel, err := c.SelectFlags.parse(c.IDs, time.Now())
	if err != nil {
		return err
	}
	return c.StoreFlags.With(c.Timeout, cli.OpenOptions{}, func(ctx context.Context, o *cli.Opened) error {
		return c.cancel(ctx, app, o, sel)
	})
}

func (c *CancelCmd) cancel(ctx context.Context, app *cli.App, o *cli.Opened, sel selection) error {
	cl, ok := o.Store.(outbox.Canceler)
	if !ok {
		return fmt.Errorf("this backend (%T) does not implement outbox.Canceler, which cancel needs", o.Store)
	}
	out := app.Stdout
	ids := sel.ids
	if len(ids) == 0 {
		in, err := inspector(o.Store)
		if err != nil {
			return err
		}
		entries, _, err := ops.Collect(ctx, in, sel.f, ops.CollectOptions{Batch: c.Batch})
		if err != nil {
			return o.Explain(err)
		}
		if len(entries) == 0 {
			fmt.Fprintf(out, "no parked entries%s in %s: nothing to cancel\n", matching(sel), o.Outbox)
			return nil
		}
		ids = ops.IDs(entries)
	}
	if c.DryRun {
		return c.dryRun(ctx, out, o, sel, ids)
	}
	if len(sel.ids) == 0 {
		if err := cli.Confirm(app, c.Yes, "cancel (delete) "+sel.describe(len(ids), o), true); err != nil {
			return err
		}
	}
	pr := cli.NewProgress(app, len(ids), "cancel")
	pr.Brief(c.Verbose)
	defer pr.Done()
	res, err := ops.Cancel(ctx, cl, ids, ops.CancelOptions{Progress: func(id string, oc ops.Outcome) {
		if oc == ops.NotFound {
			pr.Line("%s: %s", cli.Cell(id), ops.ReasonNotFound)
		} else {
			pr.Entry("%s: cancelled", cli.Cell(id))
		}
		pr.Add(1)
	}})
	pr.Done()
	switch {
	case err != nil:
		fmt.Fprintf(out, "cancelled %d entries before the error\n", res.Cancelled)
		return o.Explain(err)
	case res.NotFound > 0:
		fmt.Fprintf(out, "cancelled %d entries, %d not found\n", res.Cancelled, res.NotFound)
	default:
		fmt.Fprintf(out, "cancelled %d entries\n", res.Cancelled)
	}
	printLeftOut(out, pr)
	return nil
}

// dryRun prints what cancel would do with ids, with the state of each
// named one when the store can tell it.
func (c *CancelCmd) dryRun(ctx context.Context, out io.Writer, o *cli.Opened, sel selection, ids []string) error {
	lk, canLook := o.Store.(outbox.Looker)
	n := 0
	for _, id := range ids {
		if !canLook || len(sel.ids) == 0 {
			fmt.Fprintf(out, "%s: would cancel\n", cli.Cell(id))
			n++
			continue
		}
		info, err := lk.Lookup(ctx, id)
		switch {
		case errors.Is(err, outbox.ErrNotFound):
			fmt.Fprintf(out, "%s: %s\n", cli.Cell(id), ops.ReasonNotFound)
		case err != nil:
			return o.Explain(err)
		default:
			fmt.Fprintf(out, "%s: would cancel (%s)\n", cli.Cell(id), state(info))
			n++
		}
	}
	fmt.Fprintf(out, "would cancel %d entries (dry run: nothing changed)\n", n)
	return nil
}

// PurgeCmd deletes old archived entries (Postgres, MySQL).
type PurgeCmd struct {
	cli.StoreFlags
	Before  string        `required:"" placeholder:"TIME" noconfig:"" help:"Delete archived entries sent before TIME: RFC 3339, a date (UTC), or a duration ago (30d, 12h)."`
	Batch   int           `default:"1000" help:"Rows deleted per statement (each its own short transaction)."`
	Yes     bool          `noconfig:"" help:"Go ahead without asking (needed when there is no terminal to ask on)."`
	Timeout time.Duration `default:"10m" help:"Give up after this long."`
}

// Run purges.
func (c *PurgeCmd) Run(app *cli.App) error {
	if c.Batch < 1 {
		return cli.UsageError("--batch must be at least 1")
	}
	before, err := ops.ParseWhen(c.Before, time.Now())
	if err != nil {
		return cli.UsageError("--before: %v", err)
	}
	if t, err := cli.ParseStore(c.Store); err == nil && t.Kind == "redis" {
		return cli.UsageError("purge works on the Postgres and MySQL archives; a Redis outbox has no archive (sent entries are deleted when they are sent), so there is nothing to purge")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	o, err := c.Open(ctx, cli.OpenOptions{})
	if err != nil {
		return err
	}
	defer o.Close()
	purger, archive := archiveOf(o)
	if purger == nil {
		return cli.UsageError("purge works on the Postgres and MySQL archives only")
	}
	if err := cli.Confirm(app, c.Yes, fmt.Sprintf("delete the entries of %s sent before %s", archive, before.UTC().Format(time.RFC3339)), false); err != nil {
		return err
	}
	n, err := purger.PurgeArchive(ctx, before, c.Batch)
	if err != nil {
		fmt.Fprintf(app.Stdout, "purged %d archived entries before the error\n", n)
		return o.Explain(err)
	}
	fmt.Fprintf(app.Stdout, "purged %d archived entries sent before %s from %s\n", n, before.UTC().Format(time.RFC3339), archive)
	if n > 0 {
		return nil
	}
	return noArchiveHint(ctx, app, o, archive)
}

// archivePurger is the purge of a backend with an archive.
type archivePurger interface {
	PurgeArchive(ctx context.Context, before time.Time, batchSize int) (int64, error)
}

// archiveOf is the backend of o that purges its archive, and the
// archive's quoted name; nil when o has no archive.
func archiveOf(o *cli.Opened) (archivePurger, string) {
	switch {
	case o.Postgres != nil:
		return o.Postgres, strings.TrimSuffix(o.Outbox, `"`) + `_archive"`
	case o.MySQL != nil:
		return o.MySQL, cli.MySQLQuote(cli.OrDefault(o.Flags.Table, mysqloutbox.DefaultTable) + "_archive")
	}
	return nil, ""
}

// noArchiveHint says, when archive holds no row at all, that the outbox's
// relays do not archive, and what turns archiving on.
func noArchiveHint(ctx context.Context, app *cli.App, o *cli.Opened, archive string) error {
	var found bool
	q := "SELECT EXISTS (SELECT 1 FROM " + archive + ")"
	var err error
	if o.SQL != nil {
		err = o.SQL.QueryRowContext(ctx, q).Scan(&found)
	} else {
		err = o.Pool.QueryRow(ctx, q).Scan(&found)
	}
	if err != nil {
		return o.Explain(err)
	}
	if !found {
		opts := "pgoutbox.Options{Archive: true}"
		if o.SQL != nil {
			opts = "mysqloutbox.Options{Archive: true}"
		}
		fmt.Fprintf(app.Stdout, "%s is empty: this outbox does not archive. Sent entries are deleted when they are sent unless its relays archive them ('outbox relay --archive', or %s in the code that runs a relay), so purge has nothing to do; 'outbox relay --archive --archive-retention 7d' also removes old archived entries by itself\n", archive, opts)
	}
	return nil
}

// plural picks one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
