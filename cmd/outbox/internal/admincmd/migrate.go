package admincmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// MigrateCmd groups the migration commands.
type MigrateCmd struct {
	Up     MigrateUpCmd     `cmd:"" help:"Create the outbox (with --partitions N), or bring an existing one's tables to the newest version. Redis: store the partition count. With --inbox: create or upgrade a consumer's inbox tables instead."`
	Down   MigrateDownCmd   `cmd:"" help:"Roll the outbox's tables back one version, or to --to (Postgres, MySQL; --to 0 drops the outbox and its entries). With --inbox: drop a consumer's inbox tables."`
	Status MigrateStatusCmd `cmd:"" help:"Which migrations are applied, and the stored partition count. With --inbox: those of a consumer's inbox."`
	SQL    MigrateSQLCmd    `cmd:"" name:"sql" help:"Print the SQL that creates the outbox (or with --inbox, a consumer's inbox), for goose, golang-migrate, psql or mysql (Postgres without --store; MySQL with a mysql:// --store, which is not connected to)."`
}

// MigrateUpCmd creates or upgrades an outbox.
type MigrateUpCmd struct {
	cli.StoreFlags
	InboxFlags
	Partitions int           `placeholder:"N" noconfig:"" help:"The partition count to create the outbox with (1 or more). It is stored with the outbox and fixed from then on: give it when creating, and leave it off afterwards (a different count is refused)."`
	To         int           `placeholder:"VERSION" noconfig:"" default:"-1" help:"Postgres, MySQL: migrate up to this version only (default: the newest)."`
	Timeout    time.Duration `default:"1m" help:"Give up after this long."`
	// ArchivePartitioned is pgoutbox.Options.ArchivePartitioned.
	ArchivePartitioned bool `noconfig:"" help:"Postgres: make the archive (<table>_archive) a table partitioned by UTC day, so retention drops whole days instead of deleting rows. Converts an existing plain archive while relays keep running (short locks, retried); see docs/postgres.md, \"Retention and the partitioned archive\". Running it again adds missing day partitions."`
}

// Run migrates up.
func (c *MigrateUpCmd) Run(app *cli.App) error {
	if err := c.check(c.Partitions); err != nil {
		return err
	}
	if c.Inbox {
		if c.ArchivePartitioned {
			return cli.UsageError("--archive-partitioned applies to an outbox's archive; an inbox has none")
		}
		return c.runInbox(app)
	}
	if c.Partitions < 0 {
		return cli.UsageError("--partitions must be 1 or more")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	o, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	if err := c.checkArchivePartitioned(o.Kind); err != nil {
		return err
	}
	if o.Kind == "redis" {
		if c.To != -1 {
			return cli.UsageError("--to applies to Postgres migrations; a Redis outbox has none")
		}
		return c.redisUp(ctx, app, o)
	}
	if o.Kind == "mysql" {
		return c.mysqlUp(ctx, app, o)
	}
	before, err := pgStatus(ctx, o)
	if err != nil {
		return err
	}
	to := c.To
	if to == -1 {
		to = pgoutbox.LatestVersion()
	}
	if to < before.Version {
		return cli.UsageError("%s is at version %d, above --to %d: 'outbox migrate up' never goes down; use 'outbox migrate down --to %d'", o.Outbox, before.Version, to, to)
	}
	if to >= partitionsVersion && before.Partitions == nil && c.Partitions == 0 {
		if before.Version == 0 {
			return cli.UsageError("creating the outbox %s needs its partition count: pass --partitions N (1 or more; it is stored with the outbox and fixed from then on)", o.Outbox)
		}
		return cli.UsageError("the outbox %s was created before the partition count was stored: pass --partitions N with the count its appenders and relays use (1 if they never set one)", o.Outbox)
	}
	opts := pgoutbox.Options{Schema: c.Schema, Table: c.Table, Partitions: c.Partitions, ArchivePartitioned: c.ArchivePartitioned}
	if err := pgoutbox.MigrateTo(ctx, o.Pool, opts, to); err != nil {
		var mismatch *outbox.PartitionMismatchError
		if errors.As(err, &mismatch) {
			return fmt.Errorf("%w (the count is fixed when the outbox is created; leave --partitions off to keep the stored one)", cli.Redact(err, c.Store))
		}
		return o.Explain(err)
	}
	after, err := pgStatus(ctx, o)
	if err != nil {
		return err
	}
	reportUp(app, o, before, after)
	if c.ArchivePartitioned {
		fmt.Fprintf(app.Stdout, "the archive of %s is partitioned by UTC day, with partitions made up to %d days ahead (a relay with --archive-retention makes the next ones)\n", o.Outbox, pgoutbox.ArchiveDaysAhead)
	}
	return nil
}

// checkArchivePartitioned refuses --archive-partitioned for a store of
// kind other than postgres, or with a --to below the archive's migration.
func (c *MigrateUpCmd) checkArchivePartitioned(kind string) error {
	switch {
	case !c.ArchivePartitioned:
		return nil
	case kind != "postgres":
		return cli.UsageError("--archive-partitioned applies to Postgres only; the %s outbox has no partitioned archive", kind)
	case c.To != -1 && c.To < 2:
		return cli.UsageError("--archive-partitioned needs the archive, which migration 002 creates: leave --to off or give 2 or more")
	}
	return nil
}

func (c *MigrateUpCmd) redisUp(ctx context.Context, app *cli.App, o *cli.Opened) error {
	st, err := redisStatus(ctx, o)
	if err != nil {
		return err
	}
	if st.Partitions == nil && c.Partitions == 0 {
		return cli.UsageError("creating the outbox at %s needs its partition count: pass --partitions N (1 to 16384; it is stored with the outbox and fixed from then on)", o.Outbox)
	}
	if err := o.OpenBackend(ctx, cli.OpenOptions{Partitions: c.Partitions}); err != nil {
		return err
	}
	if st.Partitions != nil {
		fmt.Fprintf(app.Stdout, "the outbox at %s exists with %d partitions: nothing to do\n", o.Outbox, *st.Partitions)
		return nil
	}
	fmt.Fprintf(app.Stdout, "created the outbox at %s%s with %d partitions\n", o.Outbox, o.In(), o.Store.Partitions())
	return nil
}

// MigrateDownCmd rolls Postgres migrations back.
type MigrateDownCmd struct {
	cli.StoreFlags
	InboxFlags
	To      int           `placeholder:"VERSION" noconfig:"" default:"-1" help:"Roll back to this version (default: one version down; 0 drops every table of the outbox, entries and the migrations table included, and the schema if migrate up created it and nothing else is in it). With --inbox: 0, the default, which drops the inbox."`
	Yes     bool          `noconfig:"" help:"Go ahead without asking (needed when there is no terminal to ask on)."`
	Timeout time.Duration `default:"1m" help:"Give up after this long."`
}

// Run migrates down.
func (c *MigrateDownCmd) Run(app *cli.App) error {
	if err := c.check(0); err != nil {
		return err
	}
	if c.Inbox {
		return c.runInbox(app)
	}
	if t, err := cli.ParseStore(c.Store); err == nil && t.Kind == "redis" {
		return cli.UsageError("migrate down does not apply to Redis: a Redis outbox has no tables to roll back. To remove one, stop its relays and delete its keys (%s)", redisKeysHint(c.Prefix))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	o, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	if o.Kind == "mysql" {
		return c.mysqlDown(ctx, app, o)
	}
	before, err := pgStatus(ctx, o)
	if err != nil {
		return err
	}
	to, err := c.confirmDown(app, o, before.Version, ", and its schema if 'outbox migrate up' created it and nothing else is in it")
	if err != nil {
		return err
	}
	if err := pgoutbox.MigrateTo(ctx, o.Pool, pgoutbox.Options{Schema: c.Schema, Table: c.Table}, to); err != nil {
		return o.Explain(err)
	}
	fmt.Fprintf(app.Stdout, "rolled %s back from version %d to %d\n", o.Outbox, before.Version, to)
	if to > 0 {
		return nil
	}
	return c.reportRemoved(ctx, app, o)
}

// confirmDown checks --to against at, the version the outbox is at (the
// previous one when --to is not given), and asks for confirmation of the
// roll back; atZero ends what a roll back to 0 also drops. It returns the
// version to roll back to.
func (c *MigrateDownCmd) confirmDown(app *cli.App, o *cli.Opened, at int, atZero string) (int, error) {
	if at == 0 {
		return 0, fmt.Errorf("no outbox at %s%s: there is nothing to roll back", o.Outbox, o.In())
	}
	to := c.To
	if to == -1 {
		to = at - 1
	}
	if to < 0 || to >= at {
		return 0, cli.UsageError("--to %d: %s is at version %d; roll back to a version from 0 to %d", to, o.Outbox, at, at-1)
	}
	what := fmt.Sprintf("roll %s%s back from version %d to %d", o.Outbox, o.In(), at, to)
	if to == 0 {
		what += ", which drops its tables (the migrations table included) and every entry in them" + atZero
	}
	return to, cli.Confirm(app, c.Yes, what, false)
}

// reportRemoved says, after a roll back to 0, what is gone and what is
// left of the outbox's schema, and why.
func (c *MigrateDownCmd) reportRemoved(ctx context.Context, app *cli.App, o *cli.Opened) error {
	schema := cli.OrDefault(c.Schema, pgoutbox.DefaultSchema)
	st, err := pgoutbox.SchemaState(ctx, o.Pool, schema)
	if err != nil {
		return o.Explain(err)
	}
	out := app.Stdout
	name := pgx.Identifier{schema}.Sanitize()
	fmt.Fprintf(out, "dropped every table of %s, %s included\n", o.Outbox, pgx.Identifier{schema, cli.OrDefault(c.Table, pgoutbox.DefaultTable) + "_migrations"}.Sanitize())
	switch {
	case !st.Exists:
		fmt.Fprintf(out, "dropped the schema %s (created by 'outbox migrate up', and empty)\n", name)
	case !st.Marked:
		fmt.Fprintf(out, "left the schema %s: 'outbox migrate up' did not create it (it existed before, or was created by 'outbox migrate sql' or another tool); drop it yourself if nothing else uses it\n", name)
	case st.Objects == 0:
		fmt.Fprintf(out, "left the schema %s: it is not empty (it holds objects such as operators or collations)\n", name)
	default:
		fmt.Fprintf(out, "left the schema %s: it still holds %d other %s (another outbox's tables, or the application's)\n", name, st.Objects, plural(st.Objects, "object", "objects"))
	}
	return nil
}

// redisKeysHint names the keys of a Redis outbox.
func redisKeysHint(prefix string) string {
	prefix = cli.OrDefault(prefix, redisoutbox.DefaultPrefix)
	j := strings.IndexByte(prefix, '}')
	if j < 0 {
		return prefix + ":meta and the partitions' keys"
	}
	return fmt.Sprintf("%s:meta, %s:members, and %s:N}%s:* for every partition N", prefix, prefix, prefix[:j], prefix[j+1:])
}

// MigrateStatusCmd shows the migration status.
type MigrateStatusCmd struct {
	cli.StoreFlags
	InboxFlags
	cli.OutputFlags
	Timeout time.Duration `default:"30s" help:"Give up after this long."`
}

// MigrateStatusJSON is the shape of migrate status -o json.
type MigrateStatusJSON struct {
	Store  string `json:"store"`
	Kind   string `json:"kind"`
	Outbox string `json:"outbox"`
	// Exists reports whether the outbox exists (Postgres: a migration is
	// applied; Redis: its partition count is stored).
	Exists bool `json:"exists"`
	// Partitions is the stored partition count, null when none is.
	Partitions *int `json:"partitions"`
	// Version is the newest applied migration (0: none) and Latest the
	// newest this build has; both null for Redis.
	Version    *int            `json:"version"`
	Latest     *int            `json:"latest"`
	Migrations []MigrationJSON `json:"migrations"`
}

type MigrationJSON struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	Applied   bool       `json:"applied"`
	AppliedAt *time.Time `json:"applied_at"`
}

// Run prints the status.
func (c *MigrateStatusCmd) Run(app *cli.App) error {
	if err := c.check(0); err != nil {
		return err
	}
	if c.Inbox {
		return c.runInbox(app)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	o, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	var st MigrateStatusJSON
	switch o.Kind {
	case "postgres", "mysql":
		status := pgStatus
		if o.Kind == "mysql" {
			status = mysqlStatus
		}
		ps, err := status(ctx, o)
		if err != nil {
			return err
		}
		st = ps.json
	default:
		if st, err = redisStatus(ctx, o); err != nil {
			return err
		}
	}
	if c.JSON() {
		return cli.WriteJSON(app.Stdout, st)
	}
	out := app.Stdout
	create := fmt.Sprintf("create it with \"outbox migrate up --store URL %s--partitions N\"", o.NameFlags())
	if o.Kind == "redis" {
		if st.Partitions == nil {
			fmt.Fprintf(out, "no outbox at %s%s: %s\n", o.Outbox, o.In(), create)
		} else {
			fmt.Fprintf(out, "outbox at %s%s: %d partitions\n", o.Outbox, o.In(), *st.Partitions)
		}
		return nil
	}
	head := fmt.Sprintf("outbox %s%s: version %d of %d", o.Outbox, o.In(), *st.Version, *st.Latest)
	if st.Partitions != nil {
		head += fmt.Sprintf(", %d partitions", *st.Partitions)
	}
	if !st.Exists {
		head = fmt.Sprintf("no outbox at %s%s: %s", o.Outbox, o.In(), create)
	} else if *st.Version < *st.Latest {
		head += " (run 'outbox migrate up' to apply the rest)"
	}
	fmt.Fprintln(out, head)
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

// MigrateSQLCmd prints the rendered migrations.
type MigrateSQLCmd struct {
	cli.StoreFlags
	InboxFlags
	Partitions int `placeholder:"N" noconfig:"" help:"The partition count the SQL creates the outbox with (1 or more; stored with the outbox and fixed from then on). Required, except with --inbox."`
}

// Run prints the SQL. It does not connect: --store, when given, only
// tells Postgres from MySQL and Redis (Postgres without it).
func (c *MigrateSQLCmd) Run(app *cli.App) error {
	if err := c.check(c.Partitions); err != nil {
		return err
	}
	kind := "postgres"
	if c.Store != "" {
		t, err := cli.ParseStore(c.Store)
		if err != nil {
			return err
		}
		if t.Kind == "redis" && !c.Inbox {
			return cli.UsageError("migrate sql does not apply to Redis: a Redis outbox has no schema; 'outbox migrate up --store URL --partitions N' creates it")
		}
		kind = t.Kind
	}
	if err := c.CheckNames(kind); err != nil {
		return err
	}
	if c.Inbox {
		return c.runInbox(app, kind)
	}
	if c.Partitions < 1 {
		return cli.UsageError("--partitions N is required: the partition count the SQL creates the outbox with (1 or more)")
	}
	if kind == "mysql" {
		sql, err := mysqloutbox.MigrationSQL(mysqloutbox.Options{Table: c.Table, Partitions: c.Partitions})
		if err != nil {
			return cli.UsageError("%v", err)
		}
		_, err = fmt.Fprint(app.Stdout, sql)
		return err
	}
	sql, err := pgoutbox.MigrationSQL(pgoutbox.Options{Schema: c.Schema, Table: c.Table, Partitions: c.Partitions})
	if err != nil {
		return cli.UsageError("%v", err)
	}
	_, err = fmt.Fprint(app.Stdout, sql)
	return err
}

// partitionsVersion is the Postgres migration that stores the partition
// count (pgoutbox's migration 004).
const partitionsVersion = 4

// pgMigrationStatus is the migration status of a Postgres outbox.
type pgMigrationStatus struct {
	Version    int
	Partitions *int
	json       MigrateStatusJSON
}

var migrationFile = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.up\.sql$`)

// pgStatus reads which migrations are applied (the "<table>_migrations"
// table pgoutbox.Migrate keeps) and the stored partition count.
func pgStatus(ctx context.Context, o *cli.Opened) (pgMigrationStatus, error) {
	schema := cli.OrDefault(o.Flags.Schema, pgoutbox.DefaultSchema)
	table := cli.OrDefault(o.Flags.Table, pgoutbox.DefaultTable)
	migrations := pgx.Identifier{schema, table + "_migrations"}.Sanitize()
	meta := pgx.Identifier{schema, table + "_meta"}.Sanitize()
	applied := map[int]time.Time{}
	var st pgMigrationStatus
	var hasTable, hasMeta bool
	err := o.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL", migrations, meta).Scan(&hasTable, &hasMeta)
	if err != nil {
		return st, o.Explain(err)
	}
	if hasTable {
		rows, err := o.Pool.Query(ctx, "SELECT version, applied_at FROM "+migrations+" ORDER BY version")
		if err != nil {
			return st, o.Explain(err)
		}
		for rows.Next() {
			var v int
			var at time.Time
			if err := rows.Scan(&v, &at); err != nil {
				rows.Close()
				return st, o.Explain(err)
			}
			applied[v] = at.UTC()
			st.Version = max(st.Version, v)
		}
		if err := rows.Err(); err != nil {
			return st, o.Explain(err)
		}
	}
	if hasMeta {
		var n int
		if err := o.Pool.QueryRow(ctx, "SELECT partitions FROM "+meta).Scan(&n); err == nil {
			st.Partitions = &n
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return st, o.Explain(err)
		}
	}
	latest := pgoutbox.LatestVersion()
	files, err := fs.ReadDir(pgoutbox.Migrations, ".")
	if err != nil {
		return st, err
	}
	st.json = MigrateStatusJSON{Store: o.Where, Kind: o.Kind, Outbox: o.Outbox, Exists: len(applied) > 0, Partitions: st.Partitions,
		Version: &st.Version, Latest: &latest, Migrations: []MigrationJSON{}}
	for _, f := range files {
		m := migrationFile.FindStringSubmatch(f.Name())
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		mj := MigrationJSON{Version: v, Name: m[2]}
		if at, ok := applied[v]; ok {
			mj.Applied, mj.AppliedAt = true, &at
		}
		st.json.Migrations = append(st.json.Migrations, mj)
	}
	return st, nil
}

// redisStatus reads the partition count stored in the outbox's meta key
// (redisoutbox's package doc, "Keys").
func redisStatus(ctx context.Context, o *cli.Opened) (MigrateStatusJSON, error) {
	st := MigrateStatusJSON{Store: o.Where, Kind: o.Kind, Outbox: o.Outbox}
	prefix := cli.OrDefault(o.Flags.Prefix, redisoutbox.DefaultPrefix)
	s, err := o.Redis.HGet(ctx, prefix+":meta", "partitions").Result()
	switch {
	case errors.Is(err, redis.Nil):
		return st, nil
	case err != nil:
		return st, o.Explain(err)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return st, fmt.Errorf("the partition count stored in %s:meta is %q, not a number: the key was not written by the outbox", prefix, s)
	}
	st.Exists, st.Partitions = true, &n
	return st, nil
}
