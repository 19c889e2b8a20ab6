package admincmd

import (
	"context"
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

// RelaysCmd shows the fleet: the relays and the partitions each holds.
type RelaysCmd struct {
	cli.StoreFlags
	cli.OutputFlags
	Timeout time.Duration `default:"30s" help:"Give up after this long."`
}

// RelaysJSON is the shape of relays -o json.
type RelaysJSON struct {
	Store      string      `json:"store"`
	Kind       string      `json:"kind"`
	Outbox     string      `json:"outbox"`
	Partitions int         `json:"partitions"`
	Relays     []RelayJSON `json:"relays"`
	// Unheld are the partitions no relay holds while entries are pending.
	Unheld []UnheldJSON `json:"unheld"`
}

// RelayJSON is one relay.
type RelayJSON struct {
	Owner string `json:"owner"`
	// Listed is false for a lease holder without a membership record.
	Listed  bool       `json:"listed"`
	Host    string     `json:"host"`
	Version string     `json:"version"`
	Started *time.Time `json:"started"`
	// LastHeartbeat and Expires are null for a relay that is not listed.
	LastHeartbeat *time.Time `json:"last_heartbeat"`
	Expires       *time.Time `json:"expires"`
	// Partitions are the partitions whose live lease it holds.
	Partitions []int `json:"partitions"`
	// Reported are the partitions it listed in its last heartbeat.
	Reported      []int `json:"reported_partitions"`
	MaxPartitions int   `json:"max_partitions"`
}

// UnheldJSON is a partition no relay holds while entries are pending.
type UnheldJSON struct {
	Partition int        `json:"partition"`
	Pending   int64      `json:"pending"`
	Due       int64      `json:"due"`
	OldestDue *time.Time `json:"oldest_due"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func intsOrEmpty(p []int) []int {
	if p == nil {
		return []int{}
	}
	return p
}

// Run shows the fleet.
func (c *RelaysCmd) Run(app *cli.App) error {
	return c.StoreFlags.With(c.Timeout, cli.OpenOptions{}, func(ctx context.Context, o *cli.Opened) error {
		return c.show(ctx, app, o)
	})
}

func (c *RelaysCmd) show(ctx context.Context, app *cli.App, o *cli.Opened) error {
	ml, err := need[outbox.MemberLister](o.Store, "MemberLister", "relays")
	if err != nil {
		return err
	}
	pin, err := need[outbox.PartitionInspector](o.Store, "PartitionInspector", "relays")
	if err != nil {
		return err
	}
	f, err := ops.LoadFleet(ctx, ml, pin)
	if err != nil {
		return o.Explain(err)
	}
	rep := relaysJSON(o, f)
	if c.JSON() {
		return cli.WriteJSON(app.Stdout, rep)
	}
	return printRelays(app.Stdout, o, rep, time.Now())
}

func relaysJSON(o *cli.Opened, f ops.Fleet) RelaysJSON {
	rep := RelaysJSON{Store: o.Where, Kind: o.Kind, Outbox: o.Outbox, Partitions: o.Store.Partitions(), Relays: []RelayJSON{}, Unheld: []UnheldJSON{}}
	for _, r := range f.Relays {
		m := r.Member
		rep.Relays = append(rep.Relays, RelayJSON{Owner: m.Owner, Listed: r.Listed, Host: m.Host, Version: m.Version,
			Started: timePtr(m.Started), LastHeartbeat: timePtr(m.Renewed), Expires: timePtr(m.Expires),
			Partitions: intsOrEmpty(r.Held), Reported: intsOrEmpty(m.Partitions), MaxPartitions: m.MaxPartitions})
	}
	for _, p := range f.Unheld {
		rep.Unheld = append(rep.Unheld, UnheldJSON{Partition: p.Partition, Pending: p.Pending, Due: p.Due, OldestDue: timePtr(p.OldestDue)})
	}
	return rep
}

func printRelays(out io.Writer, o *cli.Opened, rep RelaysJSON, now time.Time) error {
	relays := fmt.Sprintf("%d relays", len(rep.Relays))
	if len(rep.Relays) == 1 {
		relays = "1 relay"
	}
	fmt.Fprintf(out, "outbox %s%s, %d partitions, %s\n\n", o.Outbox, o.In(), rep.Partitions, relays)
	if len(rep.Relays) == 0 {
		fmt.Fprintln(out, "no relay is running: no membership record is live and no partition is leased")
	} else {
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "OWNER\tHOST\tVERSION\tSTARTED\tLAST HEARTBEAT\tPARTITIONS")
		for _, r := range rep.Relays {
			started, beat := "-", "- (no membership record: it holds a lease but does not heartbeat)"
			if r.Started != nil {
				started = r.Started.Format(time.RFC3339)
			}
			if r.LastHeartbeat != nil {
				beat = relative(*r.LastHeartbeat, now)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", cli.Cell(r.Owner), cli.Cell(r.Host), cli.Cell(r.Version), started, beat, partitionList(r.Partitions))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	for _, u := range rep.Unheld {
		pending := fmt.Sprintf("%d entries are pending", u.Pending)
		if u.Pending == 1 {
			pending = "1 entry is pending"
		}
		fmt.Fprintf(out, "! partition %d is held by no relay while %s (%d due): nothing delivers them until a relay takes it\n", u.Partition, pending, u.Due)
	}
	return nil
}

// partitionList is "0, 3, 4", or "-" for none.
func partitionList(p []int) string {
	if len(p) == 0 {
		return "-"
	}
	s := make([]string, len(p))
	for i, n := range p {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
