package admincmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/internal/ops"
)

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
