package inboxconsumer

import (
	"context"
	"database/sql"
	"fmt"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver of sql.Open

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/chaos/internal/exactlyonce"
	"github.com/outboxrelay/outbox/internal/mysqlurl"
)

// The effect table in MySQL or MariaDB: n is AUTO_INCREMENT, assigned at
// each single-row INSERT, so its order is the rows' insertion order.
const mysqlEffectsTable = "CREATE TABLE IF NOT EXISTS effects (" +
	"n BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, " +
	"entry_id VARCHAR(255) NOT NULL, " +
	"`key` VARCHAR(255) NOT NULL, " +
	"seq BIGINT NOT NULL, " +
	"pid INT NOT NULL, " +
	"at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)" +
	") ENGINE=InnoDB"

// mysqlInboxOptions are the consumers' inbox tables in MySQL: "inbox",
// "inbox_keyseq", "inbox_offsets", "inbox_migrations".
var mysqlInboxOptions = mysqlinbox.Options{Table: "inbox"}

// openMySQL opens the database a mysql:// URL names.
func openMySQL(store string) (*sql.DB, error) {
	dsn, err := mysqlurl.DSN(store)
	if err != nil {
		return nil, fmt.Errorf("inboxconsumer: %w", err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("inboxconsumer: %w", err)
	}
	return db, nil
}

func setupMySQL(ctx context.Context, store string) error {
	db, err := openMySQL(store)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := mysqlinbox.Migrate(ctx, db, mysqlInboxOptions); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, mysqlEffectsTable); err != nil {
		return fmt.Errorf("inboxconsumer: creating the effect table: %w", err)
	}
	return nil
}

// insertEffectMySQL is the consumers' effect in MySQL: one row, in tx.
func insertEffectMySQL(ctx context.Context, tx *sql.Tx, id, key string, seq int64, pid int) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO effects (entry_id, `key`, seq, pid) VALUES (?, ?, ?, ?)", id, key, seq, pid)
	return err
}

func readEffectsMySQL(ctx context.Context, store string) ([]exactlyonce.Effect, error) {
	db, err := openMySQL(store)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT n, entry_id, `key`, seq, pid FROM effects ORDER BY n")
	if err != nil {
		return nil, fmt.Errorf("inboxconsumer: reading the effects: %w", err)
	}
	defer rows.Close()
	var out []exactlyonce.Effect
	for rows.Next() {
		var f exactlyonce.Effect
		if err := rows.Scan(&f.N, &f.ID, &f.Key, &f.Seq, &f.PID); err != nil {
			return nil, fmt.Errorf("inboxconsumer: reading the effects: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inboxconsumer: reading the effects: %w", err)
	}
	return out, nil
}

func countEffectsMySQL(ctx context.Context, store string) (applied, rows int, err error) {
	db, err := openMySQL(store)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	err = db.QueryRowContext(ctx, "SELECT COUNT(DISTINCT entry_id), COUNT(*) FROM effects").Scan(&applied, &rows)
	return applied, rows, err
}
