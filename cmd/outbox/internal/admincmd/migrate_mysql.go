package admincmd

// The migrate commands on a MySQL or MariaDB outbox (mysqloutbox's
// embedded migrations, recorded in <table>_migrations).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
)

// mysqlUp creates or upgrades a MySQL outbox.
func (c *MigrateUpCmd) mysqlUp(ctx context.Context, app *cli.App, o *cli.Opened) error {
	before, err := mysqlStatus(ctx, o)
	if err != nil {
		return err
	}
	to := c.To
	if to == -1 {
		to = mysqloutbox.LatestVersion()
	}
	if to < before.Version {
		return cli.UsageError("%s is at version %d, above --to %d: 'outbox migrate up' never goes down; use 'outbox migrate down --to %d'", o.Outbox, before.Version, to, to)
	}
	if before.Partitions == nil && c.Partitions == 0 {
		return cli.UsageError("creating the outbox %s needs its partition count: pass --partitions N (1 or more; it is stored with the outbox and fixed from then on)", o.Outbox)
	}
	opts := mysqloutbox.Options{Table: c.Table, Partitions: c.Partitions}
	if err := mysqloutbox.MigrateTo(ctx, o.SQL, opts, to); err != nil {
		var mismatch *outbox.PartitionMismatchError
		if errors.As(err, &mismatch) {
			return fmt.Errorf("%w (the count is fixed when the outbox is created; leave --partitions off to keep the stored one)", cli.Redact(err, c.Store))
		}
		return o.Explain(err)
	}
	after, err := mysqlStatus(ctx, o)
	if err != nil {
		return err
	}
	reportUp(app, o, before, after)
	return nil
}

// reportUp prints what migrate up did.
func reportUp(app *cli.App, o *cli.Opened, before, after pgMigrationStatus) {
	parts := ""
	if after.Partitions != nil {
		parts = fmt.Sprintf(", %d partitions", *after.Partitions)
	}
	switch {
	case before.Version == after.Version:
		fmt.Fprintf(app.Stdout, "%s is at version %d already%s: nothing to do\n", o.Outbox, after.Version, parts)
	case before.Version == 0:
		fmt.Fprintf(app.Stdout, "created %s%s at version %d%s\n", o.Outbox, o.In(), after.Version, parts)
	default:
		fmt.Fprintf(app.Stdout, "migrated %s%s from version %d to %d%s\n", o.Outbox, o.In(), before.Version, after.Version, parts)
	}
}

// mysqlDown rolls a MySQL outbox back to version to, after confirmation.
func (c *MigrateDownCmd) mysqlDown(ctx context.Context, app *cli.App, o *cli.Opened) error {
	before, err := mysqlStatus(ctx, o)
	if err != nil {
		return err
	}
	to, err := c.confirmDown(app, o, before.Version, "")
	if err != nil {
		return err
	}
	if err := mysqloutbox.MigrateTo(ctx, o.SQL, mysqloutbox.Options{Table: c.Table}, to); err != nil {
		return o.Explain(err)
	}
	fmt.Fprintf(app.Stdout, "rolled %s back from version %d to %d\n", o.Outbox, before.Version, to)
	if to == 0 {
		fmt.Fprintf(app.Stdout, "dropped every table of %s, %s included\n", o.Outbox, cli.MySQLQuote(cli.OrDefault(c.Table, mysqloutbox.DefaultTable)+"_migrations"))
	}
	return nil
}

// mysqlStatus reads which migrations of a MySQL outbox are applied (the
// "<table>_migrations" table mysqloutbox.Migrate keeps) and the stored
// partition count.
func mysqlStatus(ctx context.Context, o *cli.Opened) (pgMigrationStatus, error) {
	table := cli.OrDefault(o.Flags.Table, mysqloutbox.DefaultTable)
	var st pgMigrationStatus
	applied := map[int]time.Time{}
	rows, err := o.SQL.QueryContext(ctx, "SELECT version, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', applied_at) FROM "+cli.MySQLQuote(table+"_migrations"))
	switch {
	case isNoSuchTable(err):
	case err != nil:
		return st, o.Explain(err)
	default:
		defer rows.Close()
		for rows.Next() {
			var v int
			var us int64
			if err := rows.Scan(&v, &us); err != nil {
				return st, o.Explain(err)
			}
			applied[v] = time.UnixMicro(us).UTC()
			st.Version = max(st.Version, v)
		}
		if err := rows.Err(); err != nil {
			return st, o.Explain(err)
		}
	}
	var n int
	err = o.SQL.QueryRowContext(ctx, "SELECT partitions FROM "+cli.MySQLQuote(table+"_meta")+" WHERE one = 1").Scan(&n)
	switch {
	case err == nil:
		st.Partitions = &n
	case isNoSuchTable(err), errors.Is(err, sql.ErrNoRows):
	default:
		return st, o.Explain(err)
	}
	latest := mysqloutbox.LatestVersion()
	st.json = MigrateStatusJSON{Store: o.Where, Kind: o.Kind, Outbox: o.Outbox, Exists: len(applied) > 0, Partitions: st.Partitions,
		Version: &st.Version, Latest: &latest, Migrations: []MigrationJSON{}}
	files, err := fs.ReadDir(mysqloutbox.Migrations, ".")
	if err != nil {
		return st, err
	}
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

// isNoSuchTable reports whether err is MySQL's ER_NO_SUCH_TABLE.
func isNoSuchTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}
