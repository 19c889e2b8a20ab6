package inboxconsumer

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/chaos/internal/exactlyonce"
)

// Setup creates the consumers' effect table and the inbox's tables in
// the database of store: in PostgreSQL (postgres://) in schema, which it
// creates (pginbox.Migrate); in MySQL or MariaDB (mysql://) in the URL's
// database, schema unused (mysqlinbox.Migrate); in Redis
// (redis://...?prefix={tag}) there is nothing to create. Run it once before the
// consumers start; it is idempotent.
func Setup(ctx context.Context, store, schema string) error {
	if isRedis(store) {
		return nil // nothing to create
	}
	if isMySQL(store) {
		return setupMySQL(ctx, store)
	}
	return setupPG(ctx, store, schema)
}

// ReadEffects returns every effect row in store (and schema, in
// PostgreSQL), in insertion order.
func ReadEffects(ctx context.Context, store, schema string) ([]exactlyonce.Effect, error) {
	if isRedis(store) {
		return readEffectsRedis(ctx, store)
	}
	if isMySQL(store) {
		return readEffectsMySQL(ctx, store)
	}
	return readEffectsPG(ctx, store, schema)
}

// CountEffects returns how many distinct entry IDs have an effect in
// store (and schema, in PostgreSQL), and how many effect rows there are:
// what the harness polls to see the consumers catch up.
func CountEffects(ctx context.Context, store, schema string) (applied, rows int, err error) {
	if isRedis(store) {
		return countEffectsRedis(ctx, store)
	}
	if isMySQL(store) {
		return countEffectsMySQL(ctx, store)
	}
	return countEffectsPG(ctx, store, schema)
}

func isMySQL(store string) bool { return strings.HasPrefix(store, "mysql://") }

func setupPG(ctx context.Context, pgURL, schema string) error {
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("inboxconsumer: connecting to PostgreSQL: %w", err)
	}
	defer pool.Close()
	if err := pginbox.Migrate(ctx, pool, inboxOptions(schema)); err != nil {
		return err
	}
	sql := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	n bigserial PRIMARY KEY,
	entry_id text NOT NULL,
	key text NOT NULL,
	seq bigint NOT NULL,
	pid integer NOT NULL,
	at timestamptz NOT NULL DEFAULT clock_timestamp()
);`, effectsTable(schema))
	if _, err := pool.Exec(ctx, sql); err != nil {
		return fmt.Errorf("inboxconsumer: creating the tables in schema %s: %w", schema, err)
	}
	return nil
}

// inboxOptions are the consumers' inbox tables: "inbox", "inbox_keyseq"
// and "inbox_offsets" in schema.
func inboxOptions(schema string) pginbox.Options {
	return pginbox.Options{Schema: schema, Table: "inbox"}
}

// effectsTable is the quoted name of schema's effect table: one row per
// message a consumer applied, n its insertion order.
func effectsTable(schema string) string { return pgx.Identifier{schema, "effects"}.Sanitize() }

// insertEffect is the consumers' effect in PostgreSQL: one row, in tx.
func insertEffect(ctx context.Context, tx pgx.Tx, schema, id, key string, seq int64, pid int) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+effectsTable(schema)+" (entry_id, key, seq, pid) VALUES ($1, $2, $3, $4)", id, key, seq, pid)
	return err
}

func readEffectsPG(ctx context.Context, pgURL, schema string) ([]exactlyonce.Effect, error) {
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return nil, fmt.Errorf("inboxconsumer: connecting to PostgreSQL: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	rows, err := c.Query(ctx, "SELECT n, entry_id, key, seq, pid FROM "+effectsTable(schema)+" ORDER BY n")
	if err != nil {
		return nil, fmt.Errorf("inboxconsumer: reading the effects: %w", err)
	}
	var out []exactlyonce.Effect
	for rows.Next() {
		var f exactlyonce.Effect
		if err := rows.Scan(&f.N, &f.ID, &f.Key, &f.Seq, &f.PID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("inboxconsumer: reading the effects: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inboxconsumer: reading the effects: %w", err)
	}
	return out, nil
}

func countEffectsPG(ctx context.Context, pgURL, schema string) (applied, rows int, err error) {
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return 0, 0, fmt.Errorf("inboxconsumer: connecting to PostgreSQL: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	err = c.QueryRow(ctx, "SELECT count(DISTINCT entry_id), count(*) FROM "+effectsTable(schema)).Scan(&applied, &rows)
	return applied, rows, err
}
