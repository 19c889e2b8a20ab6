package admincmd

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/ops"
)

// The admin commands use only the SPI and its optional interfaces
// (Inspector, PartitionInspector, Looker, Canceler), so they work on every
// backend that implements them; only purge is Postgres's own.

// StatusCmd prints an outbox's counts, per partition and in total.
type StatusCmd struct {
	cli.StoreFlags
	cli.OutputFlags
	Timeout time.Duration `default:"30s" help:"Give up after this long."`
}

// Run prints the counts.
func (c *StatusCmd) Run(app *cli.App) error {
	return c.StoreFlags.With(c.Timeout, cli.OpenOptions{}, func(ctx context.Context, o *cli.Opened) error {
		return c.report(ctx, app, o, time.Now())
	})
}

// StatusJSON is the shape of status -o json.
type StatusJSON struct {
	Store      string     `json:"store"`
	Kind       string     `json:"kind"`
	Outbox     string     `json:"outbox"`
	Partitions int        `json:"partitions"`
	Total      CountsJSON `json:"total"`
	// ByPartition is null when the backend does not implement
	// outbox.PartitionInspector.
	ByPartition []PartitionJSON `json:"by_partition"`
	// Held is the outbox's hold (outbox.Holder), null when it is not held
	// or the backend cannot be held.
	Held *cli.HoldJSON `json:"held"`
	// Sealed is null when the backend cannot be sealed (outbox.Sealer).
	Sealed *bool `json:"sealed"`
}

type CountsJSON struct {
	Pending    int64      `json:"pending"`
	Due        int64      `json:"due"`
	Parked     int64      `json:"parked"`
	OldestDue  *time.Time `json:"oldest_due"`
	LagSeconds float64    `json:"lag_seconds"`
}

type PartitionJSON struct {
	Partition int `json:"partition"`
	CountsJSON
	Lease *LeaseJSON `json:"lease"`
}

type LeaseJSON struct {
	Owner   string    `json:"owner"`
	Version int64     `json:"version"`
	Expires time.Time `json:"expires"`
}

func counts(s outbox.Stats, now time.Time) CountsJSON {
	c := CountsJSON{Pending: s.Pending, Due: s.Due, Parked: s.Parked}
	if !s.OldestDue.IsZero() {
		t := s.OldestDue.UTC()
		c.OldestDue = &t
		c.LagSeconds = max(0, now.Sub(s.OldestDue).Seconds())
	}
	return c
}

// report prints the counts of the opened outbox.
func (c *StatusCmd) report(ctx context.Context, app *cli.App, o *cli.Opened, now time.Time) error {
	rep := StatusJSON{Store: o.Where, Kind: o.Kind, Outbox: o.Outbox, Partitions: o.Store.Partitions()}
	if pin, ok := o.Store.(outbox.PartitionInspector); ok {
		parts, err := pin.PartitionStats(ctx)
		if err != nil {
			return o.Explain(err)
		}
		var total outbox.Stats
		rep.ByPartition = []PartitionJSON{}
		for _, p := range parts {
			pj := PartitionJSON{Partition: p.Partition, CountsJSON: counts(p.Stats, now)}
			if p.Lease.Owner != "" {
				pj.Lease = &LeaseJSON{Owner: p.Lease.Owner, Version: p.Lease.Version, Expires: p.Lease.Expires.UTC()}
			}
			rep.ByPartition = append(rep.ByPartition, pj)
			total.Pending += p.Pending
			total.Due += p.Due
			total.Parked += p.Parked
			if !p.OldestDue.IsZero() && (total.OldestDue.IsZero() || p.OldestDue.Before(total.OldestDue)) {
				total.OldestDue = p.OldestDue
			}
		}
		rep.Total = counts(total, now)
	} else {
		in, err := inspector(o.Store)
		if err != nil {
			return err
		}
		s, err := in.Stats(ctx)
		if err != nil {
			return o.Explain(err)
		}
		rep.Total = counts(s, now)
	}
	if h, ok := o.Store.(outbox.Holder); ok {
		hs, err := h.HoldState(ctx)
		if err != nil {
			return o.Explain(err)
		}
		if hs.Held {
			rep.Held = &cli.HoldJSON{Reason: hs.Reason, Since: hs.Since.UTC()}
		}
	}
	if s, ok := o.Store.(outbox.Sealer); ok {
		sealed, err := s.Sealed(ctx)
		if err != nil {
			return o.Explain(err)
		}
		rep.Sealed = &sealed
	}
	if c.JSON() {
		return cli.WriteJSON(app.Stdout, rep)
	}
	out := app.Stdout
	fmt.Fprintf(out, "outbox %s%s, %d partitions\n", o.Outbox, o.In(), rep.Partitions)
	if rep.Held != nil {
		fmt.Fprintf(out, "held: %s since %s (its relays deliver nothing until it is released)\n", cli.Cell(rep.Held.Reason), rep.Held.Since.Format(time.RFC3339))
	}
	if rep.Sealed != nil && *rep.Sealed {
		fmt.Fprintln(out, "sealed: appends fail (it was moved; services append to its destination)")
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PARTITION\tPENDING\tDUE\tPARKED\tLAG\tLEASE")
	for _, p := range rep.ByPartition {
		lease := "-"
		if p.Lease != nil {
			lease = fmt.Sprintf("%s (version %d, %s left)", cli.Cell(p.Lease.Owner), p.Lease.Version, cli.Short(p.Lease.Expires.Sub(now)))
		}
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\t%s\n", p.Partition, p.Pending, p.Due, p.Parked, lag(p.CountsJSON), lease)
	}
	t := rep.Total
	fmt.Fprintf(w, "all\t%d\t%d\t%d\t%s\t\n", t.Pending, t.Due, t.Parked, lag(t))
	if err := w.Flush(); err != nil {
		return err
	}
	if rep.ByPartition == nil {
		fmt.Fprintf(out, "(no per-partition counts: this backend, %T, does not implement outbox.PartitionInspector)\n", o.Store)
	}
	return nil
}

// lag is the oldest due entry's wait, "-" when none is due.
func lag(c CountsJSON) string {
	if c.OldestDue == nil {
		return "-"
	}
	return cli.Short(time.Duration(c.LagSeconds * float64(time.Second)))
}

// ParkedCmd lists parked entries a page at a time.
type ParkedCmd struct {
	cli.StoreFlags
	cli.FilterFlags
	cli.OutputFlags
	After     string        `placeholder:"ID" noconfig:"" help:"List entries after this ID (the last ID of the previous page)."`
	Limit     int           `default:"50" noconfig:"" help:"Entries per page."`
	FullError bool          `name:"full-error" noconfig:"" help:"Show each last error in full (on one line); by default a long one keeps its start and its end (where a fix hint is) and drops the middle."`
	Timeout   time.Duration `default:"30s" help:"Give up after this long."`
}

// EntryJSON is an entry in parked -o json (and show -o json).
type EntryJSON struct {
	ID           string            `json:"id"`
	Topic        string            `json:"topic"`
	Key          string            `json:"key"`
	Partition    int               `json:"partition"`
	Attempts     int               `json:"attempts"`
	CreatedAt    time.Time         `json:"created_at"`
	NotBefore    *time.Time        `json:"not_before"`
	LastError    string            `json:"last_error"`
	Headers      map[string]string `json:"headers"`
	PayloadBytes int               `json:"payload_bytes"`
}

func toEntryJSON(e outbox.Entry) EntryJSON {
	j := EntryJSON{ID: e.ID, Topic: e.Topic, Key: e.Key, Partition: e.Partition, Attempts: e.Attempts,
		CreatedAt: e.CreatedAt.UTC(), LastError: e.LastError, Headers: e.Headers, PayloadBytes: len(e.Payload)}
	if j.Headers == nil {
		j.Headers = map[string]string{}
	}
	if !e.NotBefore.IsZero() {
		t := e.NotBefore.UTC()
		j.NotBefore = &t
	}
	return j
}

// ParkedJSON is the shape of parked -o json.
type ParkedJSON struct {
	Entries []EntryJSON `json:"entries"`
	// NextAfter is the --after of the next page; null on the last page.
	NextAfter *string `json:"next_after"`
}

// Run lists a page.
func (c *ParkedCmd) Run(app *cli.App) error {
	if c.Limit < 1 {
		return cli.UsageError("--limit must be at least 1")
	}
	f, err := c.FilterFlags.Parse(time.Now())
	if err != nil {
		return err
	}
	return c.StoreFlags.With(c.Timeout, cli.OpenOptions{}, func(ctx context.Context, o *cli.Opened) error {
		return c.list(ctx, app, o, f)
	})
}

func (c *ParkedCmd) list(ctx context.Context, app *cli.App, o *cli.Opened, f ops.Filter) error {
	in, err := inspector(o.Store)
	if err != nil {
		return err
	}
	found, next, err := ops.Page(ctx, in, f, c.After, c.Limit, ops.PageOptions{Batch: max(c.Limit, 100)})
	if err != nil {
		return o.Explain(err)
	}
	more := next != ""
	rep := ParkedJSON{Entries: []EntryJSON{}}
	for _, e := range found {
		rep.Entries = append(rep.Entries, toEntryJSON(e))
	}
	if more {
		rep.NextAfter = &next
	}
	if c.JSON() {
		return cli.WriteJSON(app.Stdout, rep)
	}
	out := app.Stdout
	if len(found) == 0 {
		what := "no parked entries"
		if f.Any() {
			what += " match " + f.Describe()
		}
		if c.After != "" {
			what += " after " + strconv.Quote(c.After)
		}
		fmt.Fprintf(out, "%s in %s\n", what, o.Outbox)
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tTOPIC\tKEY\tPARTITION\tATTEMPTS\tCREATED\tLAST ERROR")
	for _, e := range found {
		lastErr := cli.CutError(e.LastError, cli.ErrorWidth)
		if c.FullError {
			lastErr = cli.OneLine(e.LastError)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", cli.Cell(e.ID), cli.Cell(e.Topic), cli.Cell(e.Key), e.Partition, e.Attempts,
			e.CreatedAt.UTC().Format(time.RFC3339), cli.Cell(lastErr))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(out, "(more: --after %s)\n", cli.ShellQuote(found[len(found)-1].ID))
	}
	return nil
}

func inspector(s outbox.Store) (outbox.Inspector, error) {
	in, ok := s.(outbox.Inspector)
	if !ok {
		return nil, fmt.Errorf("this backend (%T) does not implement outbox.Inspector, which this command needs", s)
	}
	return in, nil
}
