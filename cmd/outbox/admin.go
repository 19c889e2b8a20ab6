package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/ops"
)

// The admin commands use only the SPI and its optional interfaces
// (Inspector, PartitionInspector, Looker, Canceler), so they work on every
// backend that implements them; only purge is Postgres's own.

// OutputFlags choose the output format of a read command.
type OutputFlags struct {
	Output string `short:"o" name:"output" enum:"text,json" default:"text" placeholder:"FORMAT" noconfig:"" help:"Output format: text, or json (a stable shape: outbox help json)."`
}

func (f OutputFlags) json() bool { return f.Output == "json" }

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// StatusCmd prints an outbox's counts, per partition and in total.
type StatusCmd struct {
	StoreFlags
	OutputFlags
	Timeout time.Duration `default:"30s" help:"Give up after this long."`
}

// Run prints the counts.
func (c *StatusCmd) Run(app *App) error {
	return c.StoreFlags.with(c.Timeout, OpenOptions{}, func(ctx context.Context, o *Opened) error {
		return c.report(ctx, app, o, time.Now())
	})
}

// statusJSON is the shape of status -o json.
type statusJSON struct {
	Store      string     `json:"store"`
	Kind       string     `json:"kind"`
	Outbox     string     `json:"outbox"`
	Partitions int        `json:"partitions"`
	Total      countsJSON `json:"total"`
	// ByPartition is null when the backend does not implement
	// outbox.PartitionInspector.
	ByPartition []partitionJSON `json:"by_partition"`
	// Held is the outbox's hold (outbox.Holder), null when it is not held
	// or the backend cannot be held.
	Held *holdJSON `json:"held"`
	// Sealed is null when the backend cannot be sealed (outbox.Sealer).
	Sealed *bool `json:"sealed"`
}

type countsJSON struct {
	Pending    int64      `json:"pending"`
	Due        int64      `json:"due"`
	Parked     int64      `json:"parked"`
	OldestDue  *time.Time `json:"oldest_due"`
	LagSeconds float64    `json:"lag_seconds"`
}

type partitionJSON struct {
	Partition int `json:"partition"`
	countsJSON
	Lease *leaseJSON `json:"lease"`
}

type leaseJSON struct {
	Owner   string    `json:"owner"`
	Version int64     `json:"version"`
	Expires time.Time `json:"expires"`
}

func counts(s outbox.Stats, now time.Time) countsJSON {
	c := countsJSON{Pending: s.Pending, Due: s.Due, Parked: s.Parked}
	if !s.OldestDue.IsZero() {
		t := s.OldestDue.UTC()
		c.OldestDue = &t
		c.LagSeconds = max(0, now.Sub(s.OldestDue).Seconds())
	}
	return c
}

// report prints the counts of the opened outbox.
func (c *StatusCmd) report(ctx context.Context, app *App, o *Opened, now time.Time) error {
	rep := statusJSON{Store: o.Where, Kind: o.Kind, Outbox: o.Outbox, Partitions: o.Store.Partitions()}
	if pin, ok := o.Store.(outbox.PartitionInspector); ok {
		parts, err := pin.PartitionStats(ctx)
		if err != nil {
			return o.explain(err)
		}
		var total outbox.Stats
		rep.ByPartition = []partitionJSON{}
		for _, p := range parts {
			pj := partitionJSON{Partition: p.Partition, countsJSON: counts(p.Stats, now)}
			if p.Lease.Owner != "" {
				pj.Lease = &leaseJSON{Owner: p.Lease.Owner, Version: p.Lease.Version, Expires: p.Lease.Expires.UTC()}
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
			return o.explain(err)
		}
		rep.Total = counts(s, now)
	}
	if h, ok := o.Store.(outbox.Holder); ok {
		hs, err := h.HoldState(ctx)
		if err != nil {
			return o.explain(err)
		}
		if hs.Held {
			rep.Held = &holdJSON{Reason: hs.Reason, Since: hs.Since.UTC()}
		}
	}
	if s, ok := o.Store.(outbox.Sealer); ok {
		sealed, err := s.Sealed(ctx)
		if err != nil {
			return o.explain(err)
		}
		rep.Sealed = &sealed
	}
	if c.json() {
		return writeJSON(app.Stdout, rep)
	}
	out := app.Stdout
	fmt.Fprintf(out, "outbox %s%s, %d partitions\n", o.Outbox, o.in(), rep.Partitions)
	if rep.Held != nil {
		fmt.Fprintf(out, "held: %s since %s (its relays deliver nothing until it is released)\n", cell(rep.Held.Reason), rep.Held.Since.Format(time.RFC3339))
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
			lease = fmt.Sprintf("%s (version %d, %s left)", cell(p.Lease.Owner), p.Lease.Version, short(p.Lease.Expires.Sub(now)))
		}
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\t%s\n", p.Partition, p.Pending, p.Due, p.Parked, lag(p.countsJSON), lease)
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
func lag(c countsJSON) string {
	if c.OldestDue == nil {
		return "-"
	}
	return short(time.Duration(c.LagSeconds * float64(time.Second)))
}

// short rounds a duration for people.
func short(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// in is " in <store>", or "" when the store is not known.
func (o *Opened) in() string {
	if o.Where == "" {
		return ""
	}
	return " in " + o.Where
}

// explain explains an error of an operation on the opened outbox (a
// connection lost, a permission missing) and removes passwords from it.
func (o *Opened) explain(err error) error {
	if o.target == nil {
		return err
	}
	return o.target.explain(err)
}

// ParkedCmd lists parked entries a page at a time.
type ParkedCmd struct {
	StoreFlags
	FilterFlags
	OutputFlags
	After     string        `placeholder:"ID" noconfig:"" help:"List entries after this ID (the last ID of the previous page)."`
	Limit     int           `default:"50" noconfig:"" help:"Entries per page."`
	FullError bool          `name:"full-error" noconfig:"" help:"Show each last error in full (on one line); by default a long one keeps its start and its end (where a fix hint is) and drops the middle."`
	Timeout   time.Duration `default:"30s" help:"Give up after this long."`
}

// entryJSON is an entry in parked -o json (and show -o json).
type entryJSON struct {
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

func toEntryJSON(e outbox.Entry) entryJSON {
	j := entryJSON{ID: e.ID, Topic: e.Topic, Key: e.Key, Partition: e.Partition, Attempts: e.Attempts,
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

// parkedJSON is the shape of parked -o json.
type parkedJSON struct {
	Entries []entryJSON `json:"entries"`
	// NextAfter is the --after of the next page; null on the last page.
	NextAfter *string `json:"next_after"`
}

// Run lists a page.
func (c *ParkedCmd) Run(app *App) error {
	if c.Limit < 1 {
		return usageError("--limit must be at least 1")
	}
	f, err := c.FilterFlags.parse(time.Now())
	if err != nil {
		return err
	}
	return c.StoreFlags.with(c.Timeout, OpenOptions{}, func(ctx context.Context, o *Opened) error {
		return c.list(ctx, app, o, f)
	})
}

func (c *ParkedCmd) list(ctx context.Context, app *App, o *Opened, f ops.Filter) error {
	in, err := inspector(o.Store)
	if err != nil {
		return err
	}
	found, next, err := ops.Page(ctx, in, f, c.After, c.Limit, ops.PageOptions{Batch: max(c.Limit, 100)})
	if err != nil {
		return o.explain(err)
	}
	more := next != ""
	rep := parkedJSON{Entries: []entryJSON{}}
	for _, e := range found {
		rep.Entries = append(rep.Entries, toEntryJSON(e))
	}
	if more {
		rep.NextAfter = &next
	}
	if c.json() {
		return writeJSON(app.Stdout, rep)
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
		lastErr := cutError(e.LastError, errorWidth)
		if c.FullError {
			lastErr = oneLine(e.LastError)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", cell(e.ID), cell(e.Topic), cell(e.Key), e.Partition, e.Attempts,
			e.CreatedAt.UTC().Format(time.RFC3339), cell(lastErr))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(out, "(more: --after %s)\n", shellQuote(found[len(found)-1].ID))
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
