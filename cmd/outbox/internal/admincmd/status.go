package admincmd

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
)

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
	// Paused is what is paused, null when the backend cannot pause
	// (outbox.Pauser).
	Paused *PausedJSON `json:"paused"`
	// Health is the store's health (outbox.HealthChecker), null when the
	// backend does not report it or reading it failed (see HealthError).
	Health *HealthJSON `json:"health"`
	// Archive is the archive's oldest entry (outbox.ArchiveJanitor), null
	// when the backend keeps no archive or reading it failed.
	Archive *ArchiveJSON `json:"archive"`
	// HealthError is why the health or the archive could not be read,
	// null when nothing failed.
	HealthError *string `json:"health_error"`
}

// PausedJSON is what is paused, in status -o json.
type PausedJSON struct {
	Topics     []PausedTopicJSON     `json:"topics"`
	Partitions []PausedPartitionJSON `json:"partitions"`
}

type PausedTopicJSON struct {
	Topic string    `json:"topic"`
	Since time.Time `json:"since"`
}

type PausedPartitionJSON struct {
	Partition int       `json:"partition"`
	Since     time.Time `json:"since"`
}

func pausedJSON(p outbox.Paused) *PausedJSON {
	j := &PausedJSON{Topics: []PausedTopicJSON{}, Partitions: []PausedPartitionJSON{}}
	for _, t := range p.Topics {
		j.Topics = append(j.Topics, PausedTopicJSON{Topic: t.Topic, Since: t.Since.UTC()})
	}
	for _, pp := range p.Partitions {
		j.Partitions = append(j.Partitions, PausedPartitionJSON{Partition: pp.Partition, Since: pp.Since.UTC()})
	}
	return j
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
	// OldestDueID is the ID of the oldest due entry; BlockedKeys counts
	// the keys blocked by a head entry. Both are null when none is due or
	// the backend does not implement outbox.Lister.
	OldestDueID *string `json:"oldest_due_id"`
	BlockedKeys *int64  `json:"blocked_keys"`
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
	if err := partitionCounts(ctx, o, &rep, now); err != nil {
		return err
	}
	if err := outboxState(ctx, o, &rep); err != nil {
		return err
	}
	storeHealth(ctx, o, &rep, now)
	if c.JSON() {
		return cli.WriteJSON(app.Stdout, rep)
	}
	return printStatus(app.Stdout, o, rep, now)
}

// partitionCounts fills rep's counts: per partition when the backend
// reports them, else the totals only.
func partitionCounts(ctx context.Context, o *cli.Opened, rep *StatusJSON, now time.Time) error {
	pin, ok := o.Store.(outbox.PartitionInspector)
	if !ok {
		in, err := inspector(o.Store)
		if err != nil {
			return err
		}
		s, err := in.Stats(ctx)
		if err != nil {
			return o.Explain(err)
		}
		rep.Total = counts(s, now)
		return nil
	}
	parts, err := pin.PartitionStats(ctx)
	if err != nil {
		return o.Explain(err)
	}
	var total outbox.Stats
	rep.ByPartition = []PartitionJSON{}
	_, lists := o.Store.(outbox.Lister)
	for _, p := range parts {
		pj := PartitionJSON{Partition: p.Partition, CountsJSON: counts(p.Stats, now)}
		if lists {
			blocked := p.BlockedKeys
			pj.BlockedKeys = &blocked
			if p.OldestDueID != "" {
				id := p.OldestDueID
				pj.OldestDueID = &id
			}
		}
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
	return nil
}

// outboxState fills what the backend reports of the outbox as a whole:
// its hold, its seal, what is paused.
func outboxState(ctx context.Context, o *cli.Opened, rep *StatusJSON) error {
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
	if p, ok := o.Store.(outbox.Pauser); ok {
		paused, err := p.Paused(ctx)
		if err != nil {
			return o.Explain(err)
		}
		rep.Paused = pausedJSON(paused)
	}
	return nil
}

// printStatus prints rep for people.
func printStatus(out io.Writer, o *cli.Opened, rep StatusJSON, now time.Time) error {
	fmt.Fprintf(out, "outbox %s%s, %d partitions\n", o.Outbox, o.In(), rep.Partitions)
	printWarnings(out, rep)
	if rep.Held != nil {
		fmt.Fprintf(out, "held: %s since %s (its relays deliver nothing until it is released)\n", cli.Cell(rep.Held.Reason), rep.Held.Since.Format(time.RFC3339))
	}
	if rep.Sealed != nil && *rep.Sealed {
		fmt.Fprintln(out, "sealed: appends fail (it was moved; services append to its destination)")
	}
	if rep.Paused != nil {
		for _, t := range rep.Paused.Topics {
			fmt.Fprintf(out, "paused: topic %s since %s (its entries stay pending and hold back their keys; %s delivers them)\n",
				strconv.Quote(t.Topic), t.Since.Format(time.RFC3339), commandLine(o, "resume", "--topic", cli.ShellQuote(t.Topic)))
		}
		for _, p := range rep.Paused.Partitions {
			fmt.Fprintf(out, "paused: partition %d since %s (its entries stay pending; %s delivers them)\n", p.Partition, p.Since.Format(time.RFC3339), commandLine(o, "resume", "--partition", strconv.Itoa(p.Partition)))
		}
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PARTITION\tPENDING\tDUE\tPARKED\tLAG\tOLDEST DUE\tBLOCKED KEYS\tLEASE")
	var blocked int64
	for _, p := range rep.ByPartition {
		lease, oldest, keys := "-", "-", "-"
		if p.Lease != nil {
			lease = fmt.Sprintf("%s (version %d, %s left)", cli.Cell(p.Lease.Owner), p.Lease.Version, cli.Short(p.Lease.Expires.Sub(now)))
		}
		if p.OldestDueID != nil {
			oldest = cli.Cell(*p.OldestDueID)
		}
		if p.BlockedKeys != nil {
			keys = strconv.FormatInt(*p.BlockedKeys, 10)
			blocked += *p.BlockedKeys
		}
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", p.Partition, p.Pending, p.Due, p.Parked, lag(p.CountsJSON), oldest, keys, lease)
	}
	t := rep.Total
	allBlocked := "" // no count when the backend does not report one
	if len(rep.ByPartition) > 0 && rep.ByPartition[0].BlockedKeys != nil {
		allBlocked = strconv.FormatInt(blocked, 10)
	}
	fmt.Fprintf(w, "all\t%d\t%d\t%d\t%s\t\t%s\t\n", t.Pending, t.Due, t.Parked, lag(t), allBlocked)
	if err := w.Flush(); err != nil {
		return err
	}
	if rep.ByPartition == nil {
		fmt.Fprintf(out, "(no per-partition counts: this backend, %T, does not implement outbox.PartitionInspector)\n", o.Store)
	}
	if blocked == 1 {
		fmt.Fprintf(out, "(1 key is blocked by a failing, deferred or paused head entry: %s shows it)\n", commandLine(o, "blocked"))
	} else if blocked > 1 {
		fmt.Fprintf(out, "(%d keys are blocked by a failing, deferred or paused head entry: %s lists them)\n", blocked, commandLine(o, "blocked"))
	}
	return printHealth(out, rep)
}

// lag is the oldest due entry's wait, "-" when none is due.
func lag(c CountsJSON) string {
	if c.OldestDue == nil {
		return "-"
	}
	return cli.Short(time.Duration(c.LagSeconds * float64(time.Second)))
}
