package pgoutbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outbox"
)

var _ outbox.HealthChecker = (*Backend)(nil)

// The codes of the warnings [Backend.Health] reports
// ([outbox.HealthWarning.Code]).
const (
	// WarnAutovacuumOff: the server runs with autovacuum = off, or with
	// track_counts = off (autovacuum then never learns that a table needs
	// vacuuming). Object is "".
	WarnAutovacuumOff = "autovacuum-off"
	// WarnTableAutovacuumDisabled: a table of the outbox (or one of its
	// partitions, or its TOAST table) has the storage parameter
	// autovacuum_enabled = false. Object is the table's name.
	WarnTableAutovacuumDisabled = "table-autovacuum-disabled"
	// WarnXminHorizonHeld: a session, a prepared transaction or a
	// replication slot has held back what vacuum may remove for longer
	// than Options.XminHorizonWarning. Object names the holder: "pid N",
	// "prepared transaction GID" or "replication slot NAME".
	WarnXminHorizonHeld = "xmin-horizon-held"
)

// healthState is what Health remembers between calls: when it first saw
// each holder of the xmin horizon whose start it cannot read (a
// replication slot; a session of another role without pg_read_all_stats),
// by the database's clock. Keyed by holder and the transaction ID it
// holds, so a holder that moves on starts over.
type healthState struct {
	mu        sync.Mutex
	query     string
	firstSeen map[string]time.Time
}

// healthTable is one element of the tables column of queries/health.sql.
type healthTable struct {
	Ord        int        `json:"ord"`
	Bytes      int64      `json:"bytes"`
	Live       int64      `json:"live"`
	Dead       int64      `json:"dead"`
	LastVacuum *time.Time `json:"last_vacuum"`
	Vacuums    int64      `json:"vacuums"`
	Disabled   []string   `json:"disabled"`
}

// healthHolder is one element of the holders column of
// queries/health.sql: a session, a prepared transaction or a replication
// slot that holds the xmin horizon. Age is in seconds, nil when unknown.
type healthHolder struct {
	Kind  string   `json:"kind"`
	ID    string   `json:"id"`
	App   string   `json:"app"`
	Owner string   `json:"owner"`
	State string   `json:"state"`
	Age   *float64 `json:"age"`
	XIDs  int64    `json:"xids"`
	Xmin  string   `json:"xmin"`
}

// healthRow is the one row of queries/health.sql.
type healthRow struct {
	autovacuum, trackCounts string
	now                     time.Time
	allStats                bool
	tables                  []healthTable
	holders                 []healthHolder
}

// healthTables are the tables Health reports, in order: the outbox table,
// its archive, and with Options.KeySequence the key sequence table (every
// append updates its rows).
func (b *Backend) healthTables() []string {
	t := []string{b.names.outbox, b.names.archive}
	if b.opts.KeySequence {
		t = append(t, b.names.keyseq)
	}
	return t
}

// healthTableNames are the names Health reports for healthTables: schema
// and table joined by a dot, unquoted (for logs and metric attributes).
func (b *Backend) healthTableNames() []string {
	s, t := b.opts.Schema, b.opts.Table
	n := []string{s + "." + t, s + "." + t + "_archive"}
	if b.opts.KeySequence {
		n = append(n, s+"."+t+"_keyseq")
	}
	return n
}

// Health reads, in one statement (queries/health.sql) that reads only the
// catalogue and the statistics, the figures of the outbox table, its
// archive and, with Options.KeySequence, the key sequence table, and the
// conditions that keep autovacuum from cleaning them. See
// [outbox.HealthChecker].
//
// Tables: Name is "schema.table" (unquoted); Bytes is
// pg_total_relation_size (table, indexes, TOAST); LiveRows and DeadRows
// are n_live_tup and n_dead_tup; LastVacuum is the later of last_vacuum
// and last_autovacuum; Vacuums is vacuum_count plus autovacuum_count. A
// partitioned table's figures are the sums over its partitions (its
// LastVacuum the latest). The statistics are PostgreSQL's estimates, as
// pg_stat_user_tables shows them: without track_counts they stay 0.
//
// Warnings, in this order, each naming the figures and the fix:
// [WarnAutovacuumOff] when the server setting autovacuum or track_counts
// is off; [WarnTableAutovacuumDisabled] for each table (partition, TOAST
// table) whose autovacuum_enabled storage parameter is false; and, unless
// Options.XminHorizonWarning is negative, [WarnXminHorizonHeld] for each
// holder of the xmin horizon older than Options.XminHorizonWarning
// (those whose start the database reports first, oldest first): a session of the current database with a snapshot or a
// transaction ID whose transaction started before the bound (its pid,
// application_name, user, state and age), a prepared transaction of the
// current database prepared before the bound, and a replication slot that
// holds xmin (a standby's hot_standby_feedback), which has no start time:
// its age is how long this Backend has seen it hold the same xmin (so a
// slot is reported no sooner than the bound after the first call that
// sees it). A session whose xact_start the role cannot read (another
// role's, without pg_read_all_stats or superuser) is timed the same way,
// and its message says so. A logical slot's catalog_xmin holds back only
// the system catalogues and is not reported.
//
// It is safe for concurrent use; after Close it returns
// [outbox.ErrClosed].
func (b *Backend) Health(ctx context.Context) (outbox.Health, error) {
	const op = "Health"
	if err := b.checkOpen(op); err != nil {
		return outbox.Health{}, err
	}
	row, err := b.readHealth(ctx)
	if err != nil {
		return outbox.Health{}, b.interpretError(op, err)
	}
	names := b.healthTableNames()
	var h outbox.Health
	for _, t := range row.tables {
		if t.Ord < 1 || t.Ord > len(names) {
			continue
		}
		th := outbox.TableHealth{Name: names[t.Ord-1], Bytes: t.Bytes, LiveRows: t.Live, DeadRows: t.Dead, Vacuums: t.Vacuums}
		if t.LastVacuum != nil {
			th.LastVacuum = *t.LastVacuum
		}
		h.Tables = append(h.Tables, th)
	}
	h.Warnings = append(h.Warnings, b.autovacuumWarnings(row, h.Tables)...)
	h.Warnings = append(h.Warnings, b.holderWarnings(row, h.Tables)...)
	return h, nil
}

// readHealth runs queries/health.sql.
func (b *Backend) readHealth(ctx context.Context) (healthRow, error) {
	b.health.mu.Lock()
	if b.health.query == "" {
		b.health.query = loadQuery("health")
	}
	q := b.health.query
	b.health.mu.Unlock()
	var bound *float64
	if d := b.opts.XminHorizonWarning; d > 0 {
		s := d.Seconds()
		bound = &s
	}
	var r healthRow
	var tables, holders []byte
	if err := b.pool.QueryRow(ctx, q, b.healthTables(), bound).Scan(&r.autovacuum, &r.trackCounts, &r.now, &r.allStats, &tables, &holders); err != nil {
		return r, err
	}
	if err := json.Unmarshal(tables, &r.tables); err != nil {
		return r, fmt.Errorf("decoding the table figures: %w", err)
	}
	if err := json.Unmarshal(holders, &r.holders); err != nil {
		return r, fmt.Errorf("decoding the xmin horizon holders: %w", err)
	}
	return r, nil
}

// outboxFigures describes the outbox table's dead rows and size for a
// message, or "" when it was not reported.
func outboxFigures(tables []outbox.TableHealth) string {
	if len(tables) == 0 {
		return ""
	}
	t := tables[0]
	return fmt.Sprintf("the outbox table %s has %d dead rows and %s with its indexes", t.Name, t.DeadRows, formatBytes(t.Bytes))
}

// autovacuumWarnings are the warnings of the server settings and the
// tables' storage parameters.
func (b *Backend) autovacuumWarnings(r healthRow, tables []outbox.TableHealth) []outbox.HealthWarning {
	var ws []outbox.HealthWarning
	var off []string
	if !settingOn(r.autovacuum) {
		off = append(off, "autovacuum")
	}
	if !settingOn(r.trackCounts) {
		off = append(off, "track_counts")
	}
	if len(off) > 0 {
		figures := outboxFigures(tables)
		if !settingOn(r.trackCounts) {
			figures += ", as far as statistics tell: without track_counts they are not collected"
		}
		var fix []string
		for _, s := range off {
			fix = append(fix, "ALTER SYSTEM SET "+s+" = on;")
		}
		ws = append(ws, outbox.HealthWarning{Code: WarnAutovacuumOff, Message: fmt.Sprintf(
			"PostgreSQL runs with %s = off, so no autovacuum reclaims the rows the relay deletes and the table grows without bound (%s): run %s SELECT pg_reload_conf(); as a superuser (or set it in postgresql.conf and reload)",
			strings.Join(off, " = off and "), figures, strings.Join(fix, " "))})
	}
	names := b.healthTableNames()
	for _, t := range r.tables {
		if t.Ord < 1 || t.Ord > len(names) {
			continue
		}
		for _, rel := range t.Disabled {
			ws = append(ws, outbox.HealthWarning{Code: WarnTableAutovacuumDisabled, Object: names[t.Ord-1], Message: fmt.Sprintf(
				"the table %s has autovacuum_enabled = false, so autovacuum never reclaims its dead rows (%s has %d dead rows and %s with its indexes): run ALTER TABLE %s RESET (%sautovacuum_enabled);",
				rel, names[t.Ord-1], t.Dead, formatBytes(t.Bytes), strings.TrimSuffix(rel, " (its TOAST table)"), toastPrefix(rel))})
		}
	}
	return ws
}

// toastPrefix is "toast." for a relation named as a table's TOAST table.
func toastPrefix(rel string) string {
	if strings.HasSuffix(rel, " (its TOAST table)") {
		return "toast."
	}
	return ""
}

// settingOn reports whether a boolean server setting, as current_setting
// shows it, is on.
func settingOn(v string) bool { return v != "off" }

// holderWarnings are the warnings of the xmin horizon's holders, and the
// bookkeeping of the holders whose start Health cannot read.
func (b *Backend) holderWarnings(r healthRow, tables []outbox.TableHealth) []outbox.HealthWarning {
	bound := b.opts.XminHorizonWarning
	if bound <= 0 {
		return nil
	}
	b.health.mu.Lock()
	defer b.health.mu.Unlock()
	seen := make(map[string]time.Time, len(r.holders))
	var ws []outbox.HealthWarning
	hidden := 0
	for _, hd := range r.holders {
		age, timed := time.Duration(0), hd.Age != nil
		if timed {
			age = time.Duration(*hd.Age * float64(time.Second))
		} else {
			key := hd.Kind + "\x00" + hd.ID + "\x00" + hd.Xmin
			first, ok := b.health.firstSeen[key]
			if !ok {
				first = r.now
			}
			seen[key] = first
			age = r.now.Sub(first)
			if hd.Kind == "session" {
				hidden++
			}
		}
		if age < bound {
			continue
		}
		ws = append(ws, holderWarning(hd, age, timed, tables))
	}
	b.health.firstSeen = seen
	if hidden > 0 && !r.allStats {
		b.opts.Logger.Debug("pgoutbox: Health: sessions of other roles hold a snapshot or transaction ID, but this role cannot see when their transactions started (grant it pg_read_all_stats); they are timed from when Health first saw them",
			"sessions", hidden)
	}
	return ws
}

// holderWarning is the warning of one holder of the xmin horizon that has
// held it for age (timed: read from the database, else as seen by Health).
func holderWarning(hd healthHolder, age time.Duration, timed bool, tables []outbox.TableHealth) outbox.HealthWarning {
	figures := outboxFigures(tables)
	held := "for " + formatAge(age)
	if !timed {
		held = "for at least " + formatAge(age) + " (as long as this relay has seen it)"
	}
	w := outbox.HealthWarning{Code: WarnXminHorizonHeld}
	switch hd.Kind {
	case "session":
		w.Object = "pid " + hd.ID
		who := fmt.Sprintf("session pid %s (application_name %q, user %q", hd.ID, hd.App, hd.Owner)
		if hd.State != "" {
			who += ", " + hd.State
		}
		who += ")"
		if !timed {
			who += ", whose transaction start this role cannot see without pg_read_all_stats,"
		}
		w.Message = fmt.Sprintf("%s has held a snapshot or transaction ID %s (%d transactions old), so vacuum can remove no row deleted since then (%s): end that transaction (commit or roll back in the application), or run SELECT pg_terminate_backend(%s);",
			who, held, hd.XIDs, figures, hd.ID)
	case "prepared":
		w.Object = "prepared transaction " + hd.ID
		lit := quoteLiteral(hd.ID)
		w.Message = fmt.Sprintf("the prepared transaction %s (owner %q) has held its transaction ID %s (%d transactions old), so vacuum can remove no row deleted since then (%s): finish it with COMMIT PREPARED %s; or ROLLBACK PREPARED %s;",
			lit, hd.Owner, held, hd.XIDs, figures, lit, lit)
	default: // slot
		w.Object = "replication slot " + hd.ID
		lit := quoteLiteral(hd.ID)
		w.Message = fmt.Sprintf("the %s replication slot %s has held xmin %s %s (%d transactions old; a standby's hot_standby_feedback), so vacuum can remove no row deleted since then, in every database (%s): end the standby's long queries, or, if the standby is gone, drop the slot with SELECT pg_drop_replication_slot(%s);",
			hd.State, lit, hd.Xmin, held, hd.XIDs, figures, lit)
	}
	return w
}

// formatAge renders a duration to the second (to the millisecond below
// one second).
func formatAge(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// formatBytes renders a size with a binary unit (B, KiB, MiB, GiB, TiB).
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, 0
	for v >= 1024 && unit < 3 {
		v /= 1024
		unit++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[unit])
}
