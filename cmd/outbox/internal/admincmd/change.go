package admincmd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/outboxrelay/outbox"
)

// SelectFlags say which entries requeue and cancel work on, and how.
type SelectFlags struct {
	cli.FilterFlags
	All    bool `noconfig:"" help:"Every parked entry."`
	DryRun bool `name:"dry-run" noconfig:"" help:"Print what would be changed, one line per entry; change nothing."`
	Yes    bool `noconfig:"" help:"Go ahead with a bulk change without asking (needed when there is no terminal to ask on)."`
	Batch  int  `default:"500" aliases:"limit" help:"Entries per call on the store."`
}

// selection is what SelectFlags and IDs select.
type selection struct {
	ids []string
	all bool
	f   cli.Filter
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
	return selection{ids: dedupe(ids), all: s.All, f: f}, nil
}

// dedupe drops repeated IDs, keeping the first of each.
func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// describe says what a filter or --all selection holds, for prompts.
func (sel selection) describe(n int, o *cli.Opened) string {
	if sel.all {
		return fmt.Sprintf("all %d parked entries of %s", n, o.Outbox)
	}
	return fmt.Sprintf("the %d parked entries of %s that match %s", n, o.Outbox, sel.f.Describe())
}

// collectParked walks the parked entries once, by ID, and returns those
// that match f. Entries parked while it walks may or may not be seen;
// none is returned twice, so a relay that parks requeued entries again
// cannot make a bulk requeue loop.
func collectParked(ctx context.Context, in outbox.Inspector, f cli.Filter, pageSize int) ([]outbox.Entry, error) {
	var out []outbox.Entry
	for cursor := ""; ; {
		page, err := in.Parked(ctx, cursor, pageSize)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			if f.Match(e) {
				e.Payload = nil // not needed; the walk may be long
				out = append(out, e)
			}
		}
		if len(page) < pageSize {
			return out, nil
		}
		cursor = page[len(page)-1].ID
	}
}

// byCreation orders entries oldest first (ties by ID), so requeue batches
// go in append order as far as the store's clock tells it.
func byCreation(es []outbox.Entry) {
	sort.SliceStable(es, func(i, j int) bool {
		if !es[i].CreatedAt.Equal(es[j].CreatedAt) {
			return es[i].CreatedAt.Before(es[j].CreatedAt)
		}
		return es[i].ID < es[j].ID
	})
}

func chunks(ids []string, n int) [][]string {
	var out [][]string
	for len(ids) > n {
		out = append(out, ids[:n])
		ids = ids[n:]
	}
	if len(ids) > 0 {
		out = append(out, ids)
	}
	return out
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
	var todo []outbox.Entry // parked, to requeue
	if len(sel.ids) > 0 {
		lk, ok := o.Store.(outbox.Looker)
		for _, id := range sel.ids {
			if !ok {
				todo = append(todo, outbox.Entry{ID: id})
				continue
			}
			info, err := lk.Lookup(ctx, id)
			switch {
			case errors.Is(err, outbox.ErrNotFound):
				fmt.Fprintf(out, "%s: not found (already sent, cancelled, or never appended)\n", cli.Cell(id))
			case err != nil:
				return o.Explain(err)
			case !info.Parked:
				fmt.Fprintf(out, "%s: not parked (it is pending; requeue moves parked entries only)\n", cli.Cell(id))
			default:
				todo = append(todo, info.Entry)
			}
		}
		if ok {
			byCreation(todo)
		}
	} else {
		if todo, err = collectParked(ctx, in, sel.f, c.Batch); err != nil {
			return o.Explain(err)
		}
		byCreation(todo)
	}
	ids := idsOf(todo)
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
	if sel.all {
		if err := cli.Confirm(app, c.Yes, "requeue "+sel.describe(len(ids), o), true); err != nil {
			return err
		}
	}
	pr := cli.NewProgress(app, len(ids), "requeue")
	defer pr.Done()
	_, canLook := o.Store.(outbox.Looker)
	total, refusedAll := 0, 0
	for _, chunk := range chunks(ids, c.Batch) {
		n, err := in.Requeue(ctx, chunk...)
		var refused *outbox.RequeueRefusedError
		if err != nil && !errors.As(err, &refused) {
			pr.Done()
			fmt.Fprintf(out, "requeued %d entries before the error\n", total)
			return o.Explain(err)
		}
		total += n
		why := map[string]string{}
		if refused != nil {
			for _, r := range refused.Refused {
				why[r.ID] = r.Reason
			}
			refusedAll += len(why)
		}
		for _, id := range chunk {
			if reason, ok := why[id]; ok {
				pr.Line("%s: refused, left parked: %s", cli.Cell(id), cli.Cell(reason))
				continue
			}
			switch {
			case n == len(chunk)-len(why):
				pr.Line("%s: requeued", cli.Cell(id))
			case canLook:
				pr.Line("%s: requeued, or no longer parked (%d of this batch of %d were requeued; the others changed state meanwhile)", cli.Cell(id), n, len(chunk))
			default:
				pr.Line("%s: requeued, or not parked (%d of this batch of %d were requeued; this backend, %T, cannot tell which: it does not implement outbox.Looker)", cli.Cell(id), n, len(chunk), o.Store)
			}
		}
		pr.Add(len(chunk))
	}
	pr.Done()
	fmt.Fprintf(out, "requeued %d entries\n", total)
	if refusedAll > 0 {
		return fmt.Errorf("%d %s left parked: %s can never be published as stored (see each one's reason above; inspect with outbox show ID, then fix the stored data and requeue again, or cancel)",
			refusedAll, plural(refusedAll, "entry was", "entries were"), plural(refusedAll, "it", "they"))
	}
	return nil
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
		entries, err := collectParked(ctx, in, sel.f, c.Batch)
		if err != nil {
			return o.Explain(err)
		}
		if len(entries) == 0 {
			fmt.Fprintf(out, "no parked entries%s in %s: nothing to cancel\n", matching(sel), o.Outbox)
			return nil
		}
		ids = idsOf(entries)
	}
	if c.DryRun {
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
				fmt.Fprintf(out, "%s: not found (already sent, cancelled, or never appended)\n", cli.Cell(id))
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
	if len(sel.ids) == 0 {
		if err := cli.Confirm(app, c.Yes, "cancel (delete) "+sel.describe(len(ids), o), true); err != nil {
			return err
		}
	}
	pr := cli.NewProgress(app, len(ids), "cancel")
	defer pr.Done()
	cancelled, missing := 0, 0
	for _, id := range ids {
		switch err := cl.Cancel(ctx, id); {
		case errors.Is(err, outbox.ErrNotFound):
			pr.Line("%s: not found (already sent, cancelled, or never appended)", cli.Cell(id))
			missing++
		case err != nil:
			pr.Done()
			fmt.Fprintf(out, "cancelled %d entries before the error\n", cancelled)
			return o.Explain(err)
		default:
			pr.Line("%s: cancelled", cli.Cell(id))
			cancelled++
		}
		pr.Add(1)
	}
	pr.Done()
	if missing > 0 {
		fmt.Fprintf(out, "cancelled %d entries, %d not found\n", cancelled, missing)
	} else {
		fmt.Fprintf(out, "cancelled %d entries\n", cancelled)
	}
	return nil
}

// PurgeCmd deletes old archived entries (Postgres).
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
	before, err := cli.ParseWhen(c.Before, time.Now())
	if err != nil {
		return cli.UsageError("--before: %v", err)
	}
	if t, err := cli.ParseStore(c.Store); err == nil && t.Kind == "redis" {
		return cli.UsageError("purge works on the Postgres archive; a Redis outbox has no archive (sent entries are deleted when they are sent), so there is nothing to purge")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	o, err := c.Open(ctx, cli.OpenOptions{})
	if err != nil {
		return err
	}
	defer o.Close()
	if o.Postgres == nil {
		return cli.UsageError("purge works on the Postgres archive only")
	}
	archive := strings.TrimSuffix(o.Outbox, `"`) + `_archive"`
	if err := cli.Confirm(app, c.Yes, fmt.Sprintf("delete the entries of %s sent before %s", archive, before.UTC().Format(time.RFC3339)), false); err != nil {
		return err
	}
	n, err := o.Postgres.PurgeArchive(ctx, before, c.Batch)
	if err != nil {
		fmt.Fprintf(app.Stdout, "purged %d archived entries before the error\n", n)
		return o.Explain(err)
	}
	fmt.Fprintf(app.Stdout, "purged %d archived entries sent before %s from %s\n", n, before.UTC().Format(time.RFC3339), archive)
	return nil
}

// plural picks one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
