package admincmd

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/internal/ops"
)

// HealthJSON is the store's health, in status -o json.
type HealthJSON struct {
	// Tables are the store's tables (SQL stores), [] for the others.
	Tables []TableJSON `json:"tables"`
	// Memory is the server's memory (Redis), null for the others.
	Memory *MemoryJSON `json:"memory"`
	// Warnings are the conditions that keep the store from cleaning up
	// after itself, each with its fix in Message; [] when none holds.
	Warnings []WarningJSON `json:"warnings"`
}

// TableJSON is one table of the store, in status -o json; a figure the
// store cannot tell is -1.
type TableJSON struct {
	Name       string     `json:"name"`
	Bytes      int64      `json:"bytes"`
	LiveRows   int64      `json:"live_rows"`
	DeadRows   int64      `json:"dead_rows"`
	Vacuums    int64      `json:"vacuums"`
	LastVacuum *time.Time `json:"last_vacuum"`
}

// MemoryJSON is the store server's memory, in status -o json.
type MemoryJSON struct {
	UsedBytes     int64   `json:"used_bytes"`
	RSSBytes      int64   `json:"rss_bytes"`
	Fragmentation float64 `json:"fragmentation"`
}

// WarningJSON is one warning of the store, in status -o json.
type WarningJSON struct {
	Code    string `json:"code"`
	Object  string `json:"object"`
	Message string `json:"message"`
}

// ArchiveJSON is the archive's oldest entry, in status -o json.
type ArchiveJSON struct {
	// Empty is true when the archive holds no entry; then the other
	// fields are null.
	Empty            bool       `json:"empty"`
	OldestSent       *time.Time `json:"oldest_sent"`
	OldestAgeSeconds *float64   `json:"oldest_age_seconds"`
}

// storeHealth fills rep's health and archive through ops.ReadHealth. A
// failed reading does not fail status: it is reported in HealthError
// (with its password removed), and what was read is kept.
func storeHealth(ctx context.Context, o *cli.Opened, rep *StatusJSON, now time.Time) {
	sh, err := ops.ReadHealth(ctx, o.Store, now)
	if err != nil {
		msg := o.Explain(err).Error()
		rep.HealthError = &msg
	}
	if h := sh.Health; h != nil {
		hj := &HealthJSON{Tables: []TableJSON{}, Warnings: []WarningJSON{}}
		for _, t := range h.Tables {
			tj := TableJSON{Name: t.Name, Bytes: t.Bytes, LiveRows: t.LiveRows, DeadRows: t.DeadRows, Vacuums: t.Vacuums}
			if !t.LastVacuum.IsZero() {
				last := t.LastVacuum.UTC()
				tj.LastVacuum = &last
			}
			hj.Tables = append(hj.Tables, tj)
		}
		if m := h.Memory; m != nil {
			hj.Memory = &MemoryJSON{UsedBytes: m.UsedBytes, RSSBytes: m.RSSBytes, Fragmentation: m.Fragmentation}
		}
		for _, w := range h.Warnings {
			hj.Warnings = append(hj.Warnings, WarningJSON(w)) // the same fields as outbox.HealthWarning
		}
		rep.Health = hj
	}
	if a := sh.Archive; a != nil {
		aj := &ArchiveJSON{Empty: a.Empty}
		if !a.Empty {
			sent, age := a.OldestSent.UTC(), a.OldestAge.Seconds()
			aj.OldestSent, aj.OldestAgeSeconds = &sent, &age
		}
		rep.Archive = aj
	}
}

// printWarnings prints a WARNING line for each warning of the store's
// health, with its fix (the store's message says it).
func printWarnings(out io.Writer, rep StatusJSON) {
	if rep.Health == nil {
		return
	}
	for _, w := range rep.Health.Warnings {
		about := w.Code
		if w.Object != "" {
			about += " on " + w.Object
		}
		fmt.Fprintf(out, "WARNING (%s): %s\n", cli.OneLine(about), cli.OneLine(w.Message))
	}
}

// printHealth prints the store's tables or memory, the archive's oldest
// entry, and why they could not be read.
func printHealth(out io.Writer, rep StatusJSON) error {
	if h := rep.Health; h != nil && len(h.Tables) > 0 {
		fmt.Fprintln(out)
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TABLE\tSIZE\tLIVE ROWS\tDEAD ROWS\tVACUUMS\tLAST VACUUM")
		for _, t := range h.Tables {
			last := "never"
			if t.LastVacuum != nil {
				last = t.LastVacuum.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", cli.Cell(t.Name), byteSize(t.Bytes), figure(t.LiveRows), figure(t.DeadRows), figure(t.Vacuums), last)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if h := rep.Health; h != nil && h.Memory != nil {
		m := h.Memory
		fmt.Fprintf(out, "memory: %s used, %s resident, fragmentation %.2f\n", byteSize(m.UsedBytes), byteSize(m.RSSBytes), m.Fragmentation)
	}
	if a := rep.Archive; a != nil {
		if a.Empty {
			fmt.Fprintln(out, "archive: empty (relays archive sent entries only with 'outbox relay --archive')")
		} else {
			fmt.Fprintf(out, "archive: oldest entry sent %s (%s ago)\n", a.OldestSent.Format(time.RFC3339), age(time.Duration(*a.OldestAgeSeconds*float64(time.Second))))
		}
	}
	if rep.HealthError != nil {
		fmt.Fprintf(out, "(the store's health could not be read: %s)\n", cli.OneLine(*rep.HealthError))
	}
	return nil
}

// figure is n, or "?" for a figure the store cannot tell (-1).
func figure(n int64) string {
	if n < 0 {
		return "?"
	}
	return strconv.FormatInt(n, 10)
}

// byteSize is n bytes for people: 512 B, 8.0 KiB, 11.2 MiB, 3.1 GiB.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, exp := float64(n)/unit, 0
	for v >= unit && exp < 3 {
		v /= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[exp])
}

// age is a duration for people: in days from two days on (3.5 days), else
// rounded to the second.
func age(d time.Duration) string {
	if d >= 48*time.Hour {
		return strconv.FormatFloat(d.Hours()/24, 'f', 1, 64) + " days"
	}
	return cli.Short(d.Round(time.Second))
}
