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
