package admincmd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/internal/ops"
)

// need returns s as the optional interface T, or an error that names the
// interface, the backend and the command.
func need[T any](s outbox.Store, iface, cmd string) (T, error) {
	v, ok := s.(T)
	if !ok {
		return v, fmt.Errorf("this backend (%T) does not implement outbox.%s, which %s needs: upgrade the backend, or use a store whose backend has it (postgres, redis)", s, iface, cmd)
	}
	return v, nil
}

// commandLine is the command line of the outbox command cmd on the opened
// outbox, then args, in backquotes, for hints: the command, the flags that
// name the outbox (not --store), args.
func commandLine(o *cli.Opened, cmd string, args ...string) string {
	return "`" + strings.TrimSpace("outbox "+cmd+" "+o.NameFlags()+strings.Join(args, " ")) + "`"
}

// ListFlags page through a listing.
type ListFlags struct {
	Limit     int           `default:"50" noconfig:"" help:"Entries per page."`
	FullError bool          `name:"full-error" noconfig:"" help:"Show each last error in full (on one line); by default a long one keeps its start and its end (where a fix hint is) and drops the middle."`
	Timeout   time.Duration `default:"30s" help:"Give up after this long."`
}

func (l ListFlags) check() error {
	if l.Limit < 1 {
		return cli.UsageError("--limit must be at least 1")
	}
	return nil
}

// errorCell is a last error as a list shows it.
func (l ListFlags) errorCell(s string) string {
	if l.FullError {
		return cli.Cell(cli.OneLine(s))
	}
	return cli.Cell(cli.CutError(s, cli.ErrorWidth))
}

// EntriesCmd lists the entries of one state a page at a time.
type EntriesCmd struct {
	cli.StoreFlags
	cli.FilterFlags
	cli.OutputFlags
	ListFlags
	State string `required:"" placeholder:"STATE" noconfig:"" help:"The entries to list: due (their time has come: waiting for a relay, held back by their key, or claimed), scheduled (due later, never attempted), retrying (attempted, due again later) or parked."`
	After string `placeholder:"ID" noconfig:"" help:"List entries after this ID (the last ID of the previous page)."`
}

// AttemptJSON is one attempt of an entry's history.
type AttemptJSON struct {
	At    time.Time `json:"at"`
	Owner string    `json:"owner"`
	Error string    `json:"error"`
}

// InfoJSON is an entry with its state's details, in entries and blocked
// -o json.
type InfoJSON struct {
	EntryJSON
	// DueAt is when the entry is next due; null when parked.
	DueAt *time.Time `json:"due_at"`
	// Deferred reports that an open circuit breaker deferred the entry.
	Deferred bool `json:"deferred"`
	// History is the entry's last attempts, oldest first.
	History []AttemptJSON `json:"history"`
}

func toInfoJSON(info outbox.EntryInfo) InfoJSON {
	j := InfoJSON{EntryJSON: toEntryJSON(info.Entry), Deferred: info.Deferred, History: historyJSON(info.History)}
	if !info.DueAt.IsZero() && !info.Parked {
		t := info.DueAt.UTC()
		j.DueAt = &t
	}
	return j
}

func historyJSON(h []outbox.Attempt) []AttemptJSON {
	out := make([]AttemptJSON, len(h))
	for i, a := range h {
		out[i] = AttemptJSON{At: a.At.UTC(), Owner: a.Owner, Error: a.Error}
	}
	return out
}

// EntriesJSON is the shape of entries -o json.
type EntriesJSON struct {
	State   string     `json:"state"`
	Entries []InfoJSON `json:"entries"`
	// NextAfter is the --after of the next page; null on the last page.
	NextAfter *string `json:"next_after"`
}

// Run lists a page.
func (c *EntriesCmd) Run(app *cli.App) error {
	if err := c.ListFlags.check(); err != nil {
		return err
	}
	state, err := ops.ParseState(c.State)
	var fe *ops.FieldError
	if errors.As(err, &fe) {
		return cli.UsageError("--state: %v", fe.Err)
	}
	f, err := c.FilterFlags.Parse(time.Now())
	if err != nil {
		return err
	}
	return c.StoreFlags.With(c.Timeout, cli.OpenOptions{}, func(ctx context.Context, o *cli.Opened) error {
		return c.list(ctx, app, o, state, f)
	})
}

func (c *EntriesCmd) list(ctx context.Context, app *cli.App, o *cli.Opened, state outbox.EntryState, f ops.Filter) error {
	l, err := need[outbox.Lister](o.Store, "Lister", "entries")
	if err != nil {
		return err
	}
	found, next, err := ops.Entries(ctx, l, state, f, c.After, c.Limit)
	if err != nil {
		return o.Explain(err)
	}
	rep := EntriesJSON{State: string(state), Entries: []InfoJSON{}}
	for _, e := range found {
		rep.Entries = append(rep.Entries, toInfoJSON(e))
	}
	if next != "" {
		rep.NextAfter = &next
	}
	if c.JSON() {
		return cli.WriteJSON(app.Stdout, rep)
	}
	out := app.Stdout
	if len(found) == 0 {
		what := "no " + string(state) + " entries"
		if f.Any() {
			what += " match " + f.Describe()
		}
		if c.After != "" {
			what += " after " + strconv.Quote(c.After)
		}
		fmt.Fprintf(out, "%s in %s\n", what, o.Outbox)
		return nil
	}
	now := time.Now()
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tTOPIC\tKEY\tPARTITION\tATTEMPTS\tCREATED\tDUE\tLAST ERROR")
	for _, e := range found {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", cli.Cell(e.ID), cli.Cell(e.Topic), cli.Cell(e.Key), e.Partition, attempts(e),
			e.CreatedAt.UTC().Format(time.RFC3339), dueCell(e, now), c.errorCell(e.LastError))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(out, "(more: --after %s)\n", cli.ShellQuote(next))
	}
	return nil
}

// attempts is an entry's attempt count, marked when an open breaker
// deferred it.
func attempts(e outbox.EntryInfo) string {
	if e.Deferred {
		return fmt.Sprintf("%d (deferred)", e.Attempts)
	}
	return strconv.Itoa(e.Attempts)
}

// dueCell is when an entry is next due, relative to now; "-" when parked.
func dueCell(e outbox.EntryInfo, now time.Time) string {
	if e.Parked || e.DueAt.IsZero() {
		return "-"
	}
	return relative(e.DueAt, now)
}

// relative is t in RFC 3339 and how far from now it is.
func relative(t, now time.Time) string {
	s := t.UTC().Format(time.RFC3339)
	if d := t.Sub(now); d > 0 {
		return s + " (in " + cli.Short(d) + ")"
	}
	return s + " (" + cli.Short(now.Sub(t)) + " ago)"
}
