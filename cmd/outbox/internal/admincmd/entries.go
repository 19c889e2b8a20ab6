package admincmd

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// BlockedCmd lists the keys held back by their head entry.
type BlockedCmd struct {
	cli.StoreFlags
	cli.FilterFlags
	cli.OutputFlags
	ListFlags
	After string `placeholder:"POSITION" noconfig:"" help:"List the keys after this position (the --after the previous page printed)."`
}

// BlockedJSON is the shape of blocked -o json.
type BlockedJSON struct {
	Blocked []BlockedKeyJSON `json:"blocked"`
	// NextAfter is the --after of the next page; null on the last page.
	NextAfter *string `json:"next_after"`
}

// BlockedKeyJSON is one blocked key.
type BlockedKeyJSON struct {
	Key       string `json:"key"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	// Reason is why the head holds the key back: "paused" (its topic is
	// paused), "deferred" (an open breaker deferred it) or "failing" (it
	// was attempted and failed).
	Reason string `json:"reason"`
	// Head is the entry that holds the key back.
	Head InfoJSON `json:"head"`
	// Waiting counts the pending entries of the key behind the head.
	Waiting int64 `json:"waiting"`
	// Since is when the key became blocked, by the store's clock.
	Since time.Time `json:"since"`
	// BlockedSeconds is how long it has been blocked, by this host's
	// clock.
	BlockedSeconds float64 `json:"blocked_seconds"`
}

// Run lists a page.
func (c *BlockedCmd) Run(app *cli.App) error {
	if err := c.ListFlags.check(); err != nil {
		return err
	}
	after, err := ops.ParseBlockedCursor(c.After)
	var fe *ops.FieldError
	if errors.As(err, &fe) {
		return cli.UsageError("--after: %v", fe.Err)
	}
	f, err := c.FilterFlags.Parse(time.Now())
	if err != nil {
		return err
	}
	return c.StoreFlags.With(c.Timeout, cli.OpenOptions{}, func(ctx context.Context, o *cli.Opened) error {
		return c.list(ctx, app, o, f, after)
	})
}

func (c *BlockedCmd) list(ctx context.Context, app *cli.App, o *cli.Opened, f ops.Filter, after ops.BlockedCursor) error {
	l, err := need[outbox.Lister](o.Store, "Lister", "blocked")
	if err != nil {
		return err
	}
	found, next, err := ops.Blocked(ctx, l, f, after, c.Limit)
	if err != nil {
		return o.Explain(err)
	}
	var paused outbox.Paused
	if p, ok := o.Store.(outbox.Pauser); ok {
		if paused, err = p.Paused(ctx); err != nil {
			return o.Explain(err)
		}
	}
	now := time.Now()
	rep := BlockedJSON{Blocked: []BlockedKeyJSON{}}
	for _, b := range found {
		rep.Blocked = append(rep.Blocked, BlockedKeyJSON{Key: b.Head.Key, Topic: b.Head.Topic, Partition: b.Head.Partition,
			Reason: blockReason(b.Head, paused), Head: toInfoJSON(b.Head), Waiting: b.Waiting, Since: b.Since.UTC(),
			BlockedSeconds: max(0, now.Sub(b.Since).Seconds())})
	}
	if !next.IsZero() {
		s := next.String()
		rep.NextAfter = &s
	}
	if c.JSON() {
		return cli.WriteJSON(app.Stdout, rep)
	}
	return c.print(app.Stdout, o, f, rep)
}

// blockReason says why head holds its key back.
func blockReason(head outbox.EntryInfo, paused outbox.Paused) string {
	if ok, _ := ops.PausedSince(paused, ops.PauseTarget{Topic: head.Topic}); ok && head.Topic != "" {
		return "paused"
	}
	if head.Deferred {
		return "deferred"
	}
	return "failing"
}

// reasonText is a BlockedKeyJSON.Reason for people.
var reasonText = map[string]string{
	"paused":   "topic paused",
	"deferred": "breaker open",
	"failing":  "failing",
}

func (c *BlockedCmd) print(out io.Writer, o *cli.Opened, f ops.Filter, rep BlockedJSON) error {
	if len(rep.Blocked) == 0 {
		what := "no blocked keys"
		if f.Any() {
			what += " whose head entry matches " + f.Describe()
		}
		if c.After != "" {
			what += " after " + c.After
		}
		fmt.Fprintf(out, "%s in %s\n", what, o.Outbox)
		return nil
	}
	now := time.Now()
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tTOPIC\tPARTITION\tBLOCKED FOR\tWHY\tHEAD\tATTEMPTS\tWAITING\tNEXT ATTEMPT\tLAST ERROR")
	for _, b := range rep.Blocked {
		next := "-"
		if b.Head.DueAt != nil {
			next = relative(*b.Head.DueAt, now)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", cli.Cell(b.Key), cli.Cell(b.Topic), b.Partition,
			cli.Short(time.Duration(b.BlockedSeconds*float64(time.Second))), reasonText[b.Reason], cli.Cell(b.Head.ID),
			b.Head.Attempts, b.Waiting, next, c.errorCell(b.Head.LastError))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if rep.NextAfter != nil {
		fmt.Fprintf(out, "(more: --after %s)\n", cli.ShellQuote(*rep.NextAfter))
	}
	fmt.Fprintf(out, "(%s shows a head's attempts; its key is unblocked when the head is sent, parked or cancelled, or its topic resumed)\n", commandLine(o, "show", "HEAD"))
	return nil
}
