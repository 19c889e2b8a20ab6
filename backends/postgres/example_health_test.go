package pgoutbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// Health reports the outbox's tables and what keeps autovacuum from
// cleaning them. The relay calls it every RelayOptions.HealthInterval;
// here a table's autovacuum is switched off by hand and Health names it.
// (The example prints only the table's warning: whether the server has
// autovacuum on depends on the server.)
func ExampleBackend_Health() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("OUTBOX_POSTGRES_URL"))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer pool.Close()
	schema := newExampleSchema()
	defer dropExampleSchema(pool, schema)
	if err := pgoutbox.Migrate(ctx, pool, pgoutbox.Options{Schema: schema, Partitions: 1}); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	b, err := pgoutbox.New(ctx, pool, pgoutbox.Options{Schema: schema})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer b.Close()

	table := pgx.Identifier{schema, "outbox"}.Sanitize()
	if _, err := pool.Exec(ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)"); err != nil {
		fmt.Println("alter:", err)
		return
	}
	h, err := b.Health(ctx)
	if err != nil {
		fmt.Println("health:", err)
		return
	}
	for _, t := range h.Tables {
		fmt.Printf("%s: has bytes: %v\n", strings.TrimPrefix(t.Name, schema+"."), t.Bytes > 0)
	}
	for _, w := range h.Warnings {
		if w.Code == pgoutbox.WarnTableAutovacuumDisabled {
			fmt.Println(w.Code, strings.TrimPrefix(w.Object, schema+"."), strings.Contains(w.Message, "RESET (autovacuum_enabled)"))
		}
	}
	// Output:
	// outbox: has bytes: true
	// outbox_archive: has bytes: true
	// table-autovacuum-disabled outbox true
}
