package admincmd

// The migrate commands with --inbox: the inbox store's tables (package
// inbox, the consuming side) instead of the outbox's, through pginbox
// (Postgres) and mysqlinbox (MySQL, MariaDB). A Redis inbox has no schema.

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
)

// InboxFlags make a migrate command work on an inbox's tables instead of
// the outbox's. Every migrate command embeds them.
type InboxFlags struct {
	Inbox      bool   `noconfig:"" help:"Work on the tables of the inbox store (the consuming side's record of applied messages, key sequence numbers and offsets: package inbox) instead of the outbox's. Postgres (in --schema) and MySQL; a Redis inbox has no schema."`
	InboxTable string `name:"inbox-table" noconfig:"" placeholder:"NAME" help:"With --inbox: the inbox's table; the others are named after it (<table>_keyseq, <table>_offsets, <table>_migrations). Default: inbox. --table names the outbox's and is not used with --inbox."`
}

// inboxTarget is the inbox the flags name, in the store kind.
type inboxTarget struct {
	kind string
	// name is the inbox table's name for messages: "schema"."table" or
	// `table`.
	name       string
	pg         pginbox.Options
	my         mysqlinbox.Options
	migrations string // the migrations table, quoted
}

// errRedisInbox is the answer to --inbox on a Redis store.
func errRedisInbox(cmd string) error {
	return cli.UsageError("migrate %s --inbox does not apply to Redis: a Redis inbox has no schema to create or migrate; the Redis inbox store (redisinbox) writes its keys under its prefix as messages are handled, and the janitor removes them. Drop --inbox, or point --store at the Postgres or MySQL database of your consumer", cmd)
}

// check refuses --inbox-table without --inbox, and what an inbox does not
// have.
func (f InboxFlags) check(partitions int) error {
	switch {
	case !f.Inbox && f.InboxTable != "":
		return cli.UsageError("--inbox-table names an inbox's table: add --inbox to work on the inbox, or drop --inbox-table")
	case f.Inbox && partitions != 0:
		return cli.UsageError("--partitions is the outbox's partition count; an inbox has none: drop --partitions with --inbox")
	}
	return nil
}

// target names the inbox in a store of kind (with its schema flag for
// Postgres), checking the name.
func (f InboxFlags) target(kind string, s cli.StoreFlags) (inboxTarget, error) {
	t := inboxTarget{kind: kind}
	table := cli.OrDefault(f.InboxTable, pginbox.DefaultTable)
	if kind == "mysql" {
		t.my = mysqlinbox.Options{Table: f.InboxTable}
		if _, err := mysqlinbox.MigrationSQL(t.my); err != nil {
			return t, cli.UsageError("--inbox-table: %v", err)
		}
		t.name, t.migrations = cli.MySQLQuote(table), cli.MySQLQuote(table+"_migrations")
		return t, nil
	}
	t.pg = pginbox.Options{Schema: s.Schema, Table: f.InboxTable}
	if _, err := pginbox.MigrationSQL(t.pg); err != nil {
		return t, cli.UsageError("--schema or --inbox-table: %v", err)
	}
	schema := cli.OrDefault(s.Schema, pginbox.DefaultSchema)
	t.name = pgx.Identifier{schema, table}.Sanitize()
	t.migrations = pgx.Identifier{schema, table + "_migrations"}.Sanitize()
	return t, nil
}

// connectInbox parses the store URL, refuses Redis before connecting,
// connects, and names the inbox.
func (f InboxFlags) connectInbox(ctx context.Context, cmd string, s cli.StoreFlags) (*cli.Opened, inboxTarget, error) {
	if t, err := cli.ParseStore(s.Store); err == nil && t.Kind == "redis" {
		return nil, inboxTarget{}, errRedisInbox(cmd)
	}
	o, err := s.Connect(ctx)
	if err != nil {
		return nil, inboxTarget{}, err
	}
	t, err := f.target(o.Kind, s)
	if err != nil {
		o.Close()
		return nil, t, err
	}
	return o, t, nil
}

// InboxStatusJSON is the shape of migrate status --inbox -o json.
type InboxStatusJSON struct {
	Store string `json:"store"`
	Kind  string `json:"kind"`
	// Inbox is the inbox table's quoted name.
	Inbox string `json:"inbox"`
	// Exists reports whether a migration of the inbox is applied.
	Exists bool `json:"exists"`
	// Version is the newest applied migration (0: none) and Latest the
	// newest this build has.
	Version    int             `json:"version"`
	Latest     int             `json:"latest"`
	Migrations []MigrationJSON `json:"migrations"`
}

// inboxStatus reads the applied migrations of the inbox (its
// "<table>_migrations", kept by pginbox and mysqlinbox as pgoutbox keeps
// the outbox's).
func inboxStatus(ctx context.Context, o *cli.Opened, t inboxTarget) (InboxStatusJSON, error) {
	st := InboxStatusJSON{Store: o.Where, Kind: o.Kind, Inbox: t.name, Migrations: []MigrationJSON{}}
	applied, err := inboxApplied(ctx, o, t)
	if err != nil {
		return st, err
	}
	files := pginbox.Migrations
	st.Latest = pginbox.LatestVersion()
	if t.kind == "mysql" {
		files, st.Latest = mysqlinbox.Migrations, mysqlinbox.LatestVersion()
	}
	names, err := fs.ReadDir(files, ".")
	if err != nil {
		return st, err
	}
	for _, f := range names {
		m := migrationFile.FindStringSubmatch(f.Name())
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		mj := MigrationJSON{Version: v, Name: m[2]}
		if at, ok := applied[v]; ok {
			mj.Applied, mj.AppliedAt = true, &at
		}
		st.Migrations = append(st.Migrations, mj)
	}
	for v := range applied {
		st.Version = max(st.Version, v)
	}
	st.Exists = len(applied) > 0
	return st, nil
}

// inboxApplied reads the applied versions and their times; none when the
// migrations table does not exist.
func inboxApplied(ctx context.Context, o *cli.Opened, t inboxTarget) (map[int]time.Time, error) {
	applied := map[int]time.Time{}
	if t.kind == "mysql" {
		rows, err := o.SQL.QueryContext(ctx, "SELECT version, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', applied_at) FROM "+t.migrations)
		if isNoSuchTable(err) {
			return applied, nil
		}
		if err != nil {
			return nil, o.Explain(err)
		}
		defer rows.Close()
		for rows.Next() {
			var v int
			var us int64
			if err := rows.Scan(&v, &us); err != nil {
				return nil, o.Explain(err)
			}
			applied[v] = time.UnixMicro(us).UTC()
		}
		return applied, o.Explain(rows.Err())
	}
	var exists bool
	if err := o.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.migrations).Scan(&exists); err != nil || !exists {
		return applied, o.Explain(err)
	}
	rows, err := o.Pool.Query(ctx, "SELECT version, applied_at FROM "+t.migrations)
	if err != nil {
		return nil, o.Explain(err)
	}
	var v int
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&v, &at}, func() error {
		applied[v] = at.UTC()
		return nil
	})
	return applied, o.Explain(err)
}

// runInbox creates or upgrades the inbox.
func (c *MigrateUpCmd) runInbox(app *cli.App) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	o, t, err := c.connectInbox(ctx, "up", c.StoreFlags)
	if err != nil {
		return err
	}
	defer o.Close()
	before, err := inboxStatus(ctx, o, t)
	if err != nil {
		return err
	}
	if c.To != -1 && c.To != before.Latest {
		return cli.UsageError("--to %d: migrate up --inbox brings the inbox to the newest version, %d; leave --to off", c.To, before.Latest)
	}
	if t.kind == "mysql" {
		err = mysqlinbox.Migrate(ctx, o.SQL, t.my)
	} else {
		err = pginbox.Migrate(ctx, o.Pool, t.pg)
	}
	if err != nil {
		return o.Explain(err)
	}
	after, err := inboxStatus(ctx, o, t)
	if err != nil {
		return err
	}
	switch {
	case before.Version == after.Version:
		fmt.Fprintf(app.Stdout, "the inbox %s is at version %d already: nothing to do\n", t.name, after.Version)
	case before.Version == 0:
		fmt.Fprintf(app.Stdout, "created the inbox %s%s at version %d\n", t.name, o.In(), after.Version)
	default:
		fmt.Fprintf(app.Stdout, "migrated the inbox %s%s from version %d to %d\n", t.name, o.In(), before.Version, after.Version)
	}
	return nil
}

// runInbox drops the inbox, after confirmation.
func (c *MigrateDownCmd) runInbox(app *cli.App) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	o, t, err := c.connectInbox(ctx, "down", c.StoreFlags)
	if err != nil {
		return err
	}
	defer o.Close()
	st, err := inboxStatus(ctx, o, t)
	if err != nil {
		return err
	}
	if !st.Exists {
		return fmt.Errorf("no inbox at %s%s: there is nothing to roll back", t.name, o.In())
	}
	if c.To != -1 && c.To != 0 || c.To == -1 && st.Version != 1 {
		return cli.UsageError("--to %d: migrate down --inbox rolls the inbox back to version 0 only (it is at %d); pass --to 0", c.To, st.Version)
	}
	what := fmt.Sprintf("roll the inbox %s%s back from version %d to 0, which drops its tables (%s included) and every record in them: "+
		"consumers then apply again every message the broker redelivers, and resume from the broker's offsets", t.name, o.In(), st.Version, t.migrations)
	if err := cli.Confirm(app, c.Yes, what, false); err != nil {
		return err
	}
	if t.kind == "mysql" {
		err = mysqlinbox.MigrateDown(ctx, o.SQL, t.my)
	} else {
		err = pginbox.MigrateDown(ctx, o.Pool, t.pg)
	}
	if err != nil {
		return o.Explain(err)
	}
	fmt.Fprintf(app.Stdout, "rolled the inbox %s back from version %d to 0\n", t.name, st.Version)
	fmt.Fprintf(app.Stdout, "dropped every table of the inbox %s, %s included\n", t.name, t.migrations)
	if t.kind == "postgres" {
		return reportInboxSchema(ctx, app, o, c.Schema)
	}
	return nil
}

// reportInboxSchema says whether MigrateDown dropped the schema.
func reportInboxSchema(ctx context.Context, app *cli.App, o *cli.Opened, schema string) error {
	schema = cli.OrDefault(schema, pginbox.DefaultSchema)
	var exists bool
	if err := o.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		return o.Explain(err)
	}
	name := pgx.Identifier{schema}.Sanitize()
	if exists {
		fmt.Fprintf(app.Stdout, "left the schema %s: 'outbox migrate up --inbox' did not create it, or it holds other objects (an outbox's tables, the application's)\n", name)
	} else {
		fmt.Fprintf(app.Stdout, "dropped the schema %s (created by 'outbox migrate up --inbox', and empty)\n", name)
	}
	return nil
}

// runInbox prints the inbox's migration status.
func (c *MigrateStatusCmd) runInbox(app *cli.App) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	o, t, err := c.connectInbox(ctx, "status", c.StoreFlags)
	if err != nil {
		return err
	}
	defer o.Close()
	st, err := inboxStatus(ctx, o, t)
	if err != nil {
		return err
	}
	if c.JSON() {
		return cli.WriteJSON(app.Stdout, st)
	}
	out := app.Stdout
	switch {
	case !st.Exists:
		fmt.Fprintf(out, "no inbox at %s%s: create it with \"%s\"\n", t.name, o.In(), strings.TrimSpace("outbox migrate up --inbox --store URL "+c.inboxNameFlags()))
	case st.Version < st.Latest:
		fmt.Fprintf(out, "inbox %s%s: version %d of %d (run 'outbox migrate up --inbox' to apply the rest)\n", t.name, o.In(), st.Version, st.Latest)
	default:
		fmt.Fprintf(out, "inbox %s%s: version %d of %d\n", t.name, o.In(), st.Version, st.Latest)
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "VERSION\tNAME\tAPPLIED")
	for _, m := range st.Migrations {
		at := "no"
		if m.AppliedAt != nil {
			at = m.AppliedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%03d\t%s\t%s\n", m.Version, m.Name, at)
	}
	return w.Flush()
}

// inboxNameFlags are the flags that name the inbox on a command line.
func (c *MigrateStatusCmd) inboxNameFlags() string {
	s := ""
	if c.Schema != "" {
		s += "--schema " + cli.ShellQuote(c.Schema) + " "
	}
	if c.InboxTable != "" {
		s += "--inbox-table " + cli.ShellQuote(c.InboxTable) + " "
	}
	return s
}

// runInbox prints the inbox's rendered migrations for kind, without
// connecting.
func (c *MigrateSQLCmd) runInbox(app *cli.App, kind string) error {
	if kind == "redis" {
		return errRedisInbox("sql")
	}
	t, err := c.target(kind, c.StoreFlags)
	if err != nil {
		return err
	}
	var sql string
	if kind == "mysql" {
		sql, err = mysqlinbox.MigrationSQL(t.my)
	} else {
		sql, err = pginbox.MigrationSQL(t.pg)
	}
	if err != nil {
		return cli.UsageError("%v", err)
	}
	_, err = fmt.Fprint(app.Stdout, sql)
	return err
}
