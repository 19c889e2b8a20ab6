package pgoutbox_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// TestMigrateToZeroRemovesWhatMigrateCreated: MigrateTo 0 drops the
// migrations table, and the schema only when Migrate created it and
// nothing else is in it.
func TestMigrateToZeroRemovesWhatMigrateCreated(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	ctx := t.Context()
	state := func(schema string) pgoutbox.SchemaInfo {
		t.Helper()
		st, err := pgoutbox.SchemaState(ctx, p, schema)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	t.Run("SchemaItCreatedIsDropped", func(t *testing.T) {
		opts := pgoutbox.Options{Schema: freshSchema(t, p), Partitions: 2}
		if err := pgoutbox.Migrate(ctx, p, opts); err != nil {
			t.Fatal(err)
		}
		if st := state(opts.Schema); !st.Exists || !st.Marked {
			t.Fatalf("after Migrate: %+v, want the schema marked as created by Migrate", st)
		}
		if err := pgoutbox.MigrateTo(ctx, p, opts, 0); err != nil {
			t.Fatal(err)
		}
		if st := state(opts.Schema); st.Exists {
			t.Fatalf("after MigrateTo 0: %+v, want the schema dropped", st)
		}
	})

	t.Run("SchemaItDidNotCreateIsKept", func(t *testing.T) {
		opts := pgoutbox.Options{Schema: freshSchema(t, p), Partitions: 1}
		if _, err := p.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{opts.Schema}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		if err := pgoutbox.Migrate(ctx, p, opts); err != nil {
			t.Fatal(err)
		}
		if err := pgoutbox.MigrateTo(ctx, p, opts, 0); err != nil {
			t.Fatal(err)
		}
		if st := state(opts.Schema); !st.Exists || st.Marked || st.Objects != 0 {
			t.Fatalf("after MigrateTo 0: %+v, want the caller's schema kept, empty", st)
		}
		if tableExists(t, p, opts.Schema, "outbox_migrations") {
			t.Fatal("MigrateTo 0 left the migrations table")
		}
	})

	t.Run("SchemaWithAnotherOutboxIsKept", func(t *testing.T) {
		schema := freshSchema(t, p)
		a := pgoutbox.Options{Schema: schema, Table: "a", Partitions: 1}
		b := pgoutbox.Options{Schema: schema, Table: "b", Partitions: 1}
		for _, o := range []pgoutbox.Options{a, b} {
			if err := pgoutbox.Migrate(ctx, p, o); err != nil {
				t.Fatal(err)
			}
		}
		if err := pgoutbox.MigrateTo(ctx, p, a, 0); err != nil {
			t.Fatal(err)
		}
		if st := state(schema); !st.Exists || !st.Marked || st.Objects == 0 {
			t.Fatalf("after MigrateTo 0 of a: %+v, want the schema kept for b", st)
		}
		if tableExists(t, p, schema, "a_migrations") || !tableExists(t, p, schema, "b") || !tableExists(t, p, schema, "b_migrations") {
			t.Fatal("MigrateTo 0 of a: want a's tables gone and b's kept")
		}
		if err := pgoutbox.MigrateTo(ctx, p, b, 0); err != nil {
			t.Fatal(err)
		}
		if st := state(schema); st.Exists {
			t.Fatalf("after MigrateTo 0 of b: %+v, want the schema dropped", st)
		}
	})
}

// TestMigrationSQLCommentsMatchTheSQL: the rendered SQL's comments do not
// speak of unqualified names or of the partition placeholder.
func TestMigrationSQLCommentsMatchTheSQL(t *testing.T) {
	t.Parallel()
	sql, err := pgoutbox.MigrationSQL(pgoutbox.Options{Schema: "billing", Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"unqualified", "first schema of", "{partitions}", "placeholder"} {
		if strings.Contains(sql, bad) {
			t.Errorf("MigrationSQL's output says %q, which its statements contradict", bad)
		}
	}
	if !strings.Contains(sql, `schema-qualified ("billing")`) {
		t.Errorf("MigrationSQL's header does not say the names are schema-qualified:\n%.600s", sql)
	}
}
