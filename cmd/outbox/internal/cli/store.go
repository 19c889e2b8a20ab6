package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// StoreFlags name one outbox: the store it lives in (a URL) and its name
// inside the store. Every command that works on an outbox embeds them.
//
// CONTRACT (shared by the CLI and relay work): the fields and Open's
// signature stay; Open's internals grow (URL schemes, auth, TLS, Sentinel,
// Cluster, clear errors).
type StoreFlags struct {
	Store  string `name:"store" env:"OUTBOX_STORE" placeholder:"URL" help:"The store that holds the outbox: postgres://, postgresql://, mysql://, mariadb://, redis://, rediss://, redis+sentinel://, redis+cluster:// and their TLS forms (see 'outbox help stores')."`
	Schema string `name:"schema" placeholder:"NAME" help:"Postgres schema of the outbox (default: public)."`
	Table  string `name:"table" placeholder:"NAME" help:"Postgres or MySQL table of the outbox (default: outbox)."`
	Prefix string `name:"prefix" placeholder:"PREFIX" help:"Redis key prefix of the outbox, with its {hash tag} (default: {outbox})."`
}

// OpenOptions says what a command needs from the outbox it opens.
type OpenOptions struct {
	// Partitions is the count to create the outbox with (migrate up only);
	// 0 reads the stored count, and an outbox that does not exist is an
	// error.
	Partitions int
	// Notify keeps the backend's wake-ups on (the relay); admin commands
	// leave them off.
	Notify bool
	// Archive opens a Postgres or MySQL backend that keeps sent entries in
	// its archive (pgoutbox.Options.Archive, mysqloutbox.Options.Archive:
	// the relay's --archive); a Redis outbox has no archive, and Open
	// refuses it.
	Archive bool
}

// Opened is an outbox opened from StoreFlags. Close releases the backend
// and the client or pool Open made.
type Opened struct {
	// Store is the backend; it also implements the optional interfaces
	// its backend does (Inspector, Canceler, Membership, ...).
	Store outbox.Store
	// Kind is "postgres", "mysql" or "redis".
	Kind string
	// Pool is the Postgres pool (nil for the others).
	Pool *pgxpool.Pool
	// SQL is the MySQL pool (nil for the others).
	SQL *sql.DB
	// Redis is the Redis client (nil for Postgres): a *redis.Client, a
	// *redis.ClusterClient (redis+cluster://) or a failover client
	// (redis+sentinel://).
	Redis redis.UniversalClient
	// Postgres is the Postgres backend (nil for Redis), for what only it
	// has (PurgeArchive, migrations).
	Postgres *pgoutbox.Backend
	// MySQL is the MySQL backend (nil for the others).
	MySQL *mysqloutbox.Backend
	// Outbox names the outbox inside the store, for messages:
	// "public"."outbox", `+"`outbox`"+` (MySQL) or prefix "{outbox}".
	Outbox string
	// Where is the store URL with its password removed, for messages.
	Where string

	// Flags are the flags that named the outbox.
	Flags StoreFlags

	target  *StoreTarget
	closers []func()
}

// Close closes the backend, then the client or pool.
func (o *Opened) Close() {
	for i := len(o.closers) - 1; i >= 0; i-- {
		o.closers[i]()
	}
	o.closers = nil
}

// Open connects to the outbox the flags name. It checks that the store
// answers (one ping), then opens the backend, which reads the partition
// count stored with the outbox: an outbox that does not exist is an error
// (unless opts.Partitions creates it, Redis only). Errors name the
// problem and the fix, and never hold a password.
func (f StoreFlags) Open(ctx context.Context, opts OpenOptions) (*Opened, error) {
	o, err := f.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := o.OpenBackend(ctx, opts); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// Connect parses the store URL, checks the flags that name the outbox
// against its kind, connects and pings. The Opened it returns has no
// backend yet (migrate works on it as it is).
func (f StoreFlags) Connect(ctx context.Context) (*Opened, error) {
	t, err := ParseStore(f.Store)
	if err != nil {
		return nil, err
	}
	if err := f.CheckNames(t.Kind); err != nil {
		return nil, err
	}
	t.prefix = f.Prefix
	o := &Opened{Kind: t.Kind, Where: t.Where, target: t, Flags: f}
	switch t.Kind {
	case "postgres":
		o.Outbox = pgx.Identifier{OrDefault(f.Schema, pgoutbox.DefaultSchema), OrDefault(f.Table, pgoutbox.DefaultTable)}.Sanitize()
		pool, err := pgxpool.NewWithConfig(ctx, t.pg)
		if err != nil {
			return nil, t.Explain(err)
		}
		o.Pool = pool
		o.closers = append(o.closers, pool.Close)
		if err := pool.Ping(ctx); err != nil {
			o.Close()
			return nil, t.Explain(err)
		}
	case "mysql":
		o.Outbox = MySQLQuote(OrDefault(f.Table, mysqloutbox.DefaultTable))
		if err := o.connectMySQL(ctx, t); err != nil {
			return nil, err
		}
	case "redis":
		o.Outbox = fmt.Sprintf("prefix %q", OrDefault(f.Prefix, redisoutbox.DefaultPrefix))
		if err := t.checkTLS(ctx); err != nil {
			return nil, err
		}
		client := t.newRedis()
		o.Redis = client
		o.closers = append(o.closers, func() { _ = client.Close() })
		if err := client.Ping(ctx).Err(); err != nil {
			o.Close()
			return nil, t.Explain(err)
		}
		if err := t.checkNotCluster(ctx, client); err != nil {
			o.Close()
			return nil, err
		}
	}
	return o, nil
}

// CheckNames refuses the flags that name an outbox of the other kind.
func (f StoreFlags) CheckNames(kind string) error {
	switch {
	case kind == "postgres" && f.Prefix != "":
		return UsageError("--prefix names a Redis outbox, but the store is PostgreSQL: name a Postgres outbox with --schema and --table, or drop --prefix (and prefix: in the config file)")
	case kind == "redis" && f.Prefix != "" && (strings.Count(f.Prefix, "{") != 1 || strings.Count(f.Prefix, "}") != 1 || strings.Index(f.Prefix, "}") < strings.Index(f.Prefix, "{")+2):
		return UsageError("--prefix %q must hold exactly one non-empty {hash tag}, such as {orders} or app:{orders}: every key of a partition shares its slot on Redis Cluster", f.Prefix)
	case kind == "mysql" && f.Prefix != "":
		return UsageError("--prefix names a Redis outbox, but the store is MySQL: name a MySQL outbox with --table, or drop --prefix (and prefix: in the config file)")
	case kind == "mysql" && f.Schema != "":
		return UsageError("--schema names a Postgres schema, but the store is MySQL, where the database in the store URL holds the outbox: put the database in the URL (mysql://USER@HOST:3306/DATABASE), or drop --schema (and schema: in the config file)")
	case kind == "redis" && (f.Schema != "" || f.Table != ""):
		return UsageError("--schema and --table name a Postgres outbox, but the store is Redis: name a Redis outbox with --prefix, or drop --schema/--table (and schema:/table: in the config file)")
	}
	return nil
}

// OpenBackend opens the backend on the connected client.
func (o *Opened) OpenBackend(ctx context.Context, opts OpenOptions) error {
	switch o.Kind {
	case "postgres":
		b, err := pgoutbox.New(ctx, o.Pool, pgoutbox.Options{Schema: o.Flags.Schema, Table: o.Flags.Table, Partitions: opts.Partitions, NoNotify: !opts.Notify, Archive: opts.Archive})
		if err != nil {
			return o.explainOpen(ctx, err)
		}
		o.Store, o.Postgres = b, b
		o.closers = append(o.closers, func() { _ = b.Close() })
	case "mysql":
		b, err := mysqloutbox.New(ctx, o.SQL, mysqloutbox.Options{Table: o.Flags.Table, Partitions: opts.Partitions, NoNotify: !opts.Notify, Archive: opts.Archive})
		if err != nil {
			return o.explainOpen(ctx, err)
		}
		o.Store, o.MySQL = b, b
		o.closers = append(o.closers, func() { _ = b.Close() })
	case "redis":
		if opts.Archive {
			return UsageError("%s", RedisNoArchive)
		}
		b, err := redisoutbox.New(ctx, o.Redis, redisoutbox.Options{Prefix: o.Flags.Prefix, Partitions: opts.Partitions, NoNotify: !opts.Notify})
		if err != nil {
			return o.explainOpen(ctx, err)
		}
		o.Store = b
		o.closers = append(o.closers, func() { _ = b.Close() })
	}
	return nil
}

// RedisNoArchive is why a Redis outbox refuses what needs an archive.
const RedisNoArchive = "a Redis outbox has no archive: it deletes each entry when it is sent (only the Postgres and MySQL backends can keep sent entries)"

// explainOpen turns a backend constructor's error into one a CLI user can
// act on: a missing outbox says how to create it with outbox migrate up.
func (o *Opened) explainOpen(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return o.target.Explain(err)
	}
	var mismatch *outbox.PartitionMismatchError
	if errors.As(err, &mismatch) {
		return fmt.Errorf("%w (the count is fixed when the outbox is created; leave --partitions off to use the stored one)", Redact(err, o.Flags.Store))
	}
	create := fmt.Sprintf("outbox migrate up --store URL %s--partitions N", o.NameFlags())
	switch o.Kind {
	case "postgres":
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined_table, invalid_schema_name
			var exists bool
			if qerr := o.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", o.Outbox).Scan(&exists); qerr == nil && exists {
				return &RedactedError{Msg: fmt.Sprintf("the outbox %s in %s was created before the partition count was stored with it: run \"%s\" with N the count its appenders and relays use (1 if they never set one)",
					o.Outbox, o.Where, create), Err: err}
			}
			return &RedactedError{Msg: fmt.Sprintf("no outbox at %s in %s (no such table): create it with \"%s\", or check --schema, --table and the database in the store URL",
				o.Outbox, o.Where, create), Err: err}
		}
	case "mysql":
		if isMySQLError(err, 1146) { // ER_NO_SUCH_TABLE
			return &RedactedError{Msg: fmt.Sprintf("no outbox at %s in %s (no such table): create it with \"%s\", or check --table and the database in the store URL",
				o.Outbox, o.Where, create), Err: err}
		}
	case "redis":
		if errors.Is(err, outbox.ErrInvalidArgument) {
			prefix := OrDefault(o.Flags.Prefix, redisoutbox.DefaultPrefix)
			n, qerr := o.Redis.Exists(ctx, prefix+":meta").Result()
			if qerr == nil && n == 0 {
				tag := partitionZeroKeys(prefix)
				if old, qerr := o.Redis.Exists(ctx, tag...).Result(); qerr == nil && old > 0 {
					return &RedactedError{Msg: fmt.Sprintf("the outbox at %s in %s was created by an earlier build that did not store its partition count: run \"%s\" with N the count it was created with (1 if it was never set)",
						o.Outbox, o.Where, create), Err: err}
				}
				return &RedactedError{Msg: fmt.Sprintf("no outbox at %s in %s (no %s key): create it with \"%s\", or check --prefix and the database number in the store URL",
					o.Outbox, o.Where, prefix+":meta", create), Err: err}
			}
		}
	}
	return o.target.Explain(err)
}

// In is " in <store>", or "" when the store is not known.
func (o *Opened) In() string {
	if o.Where == "" {
		return ""
	}
	return " in " + o.Where
}

// Explain explains an error of an operation on the opened outbox (a
// connection lost, a permission missing) and removes passwords from it.
func (o *Opened) Explain(err error) error {
	if o.target == nil {
		return err
	}
	return o.target.Explain(err)
}

// NameFlags are the flags that name the outbox, as a command line needs
// them ("--schema billing ").
func (o *Opened) NameFlags() string {
	var sb strings.Builder
	add := func(flag, v string) {
		if v != "" {
			fmt.Fprintf(&sb, "--%s %s ", flag, ShellQuote(v))
		}
	}
	add("schema", o.Flags.Schema)
	add("table", o.Flags.Table)
	add("prefix", o.Flags.Prefix)
	return sb.String()
}

// partitionZeroKeys are the keys partition 0 of a Redis outbox from a
// build before the stored count had (redisoutbox's package doc, "Keys").
func partitionZeroKeys(prefix string) []string {
	i, j := strings.IndexByte(prefix, '{'), strings.IndexByte(prefix, '}')
	if i < 0 || j < i {
		return nil
	}
	base := prefix[:i] + prefix[i:j] + ":0}" + prefix[j+1:]
	return []string{base + ":seq", base + ":leasever"}
}

func OrDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ShellQuote quotes s for a POSIX shell when it needs it.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@%+=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// With opens the outbox the flags name, bounded by timeout, runs fn with it
// and closes it.
func (f StoreFlags) With(timeout time.Duration, opts OpenOptions, fn func(context.Context, *Opened) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	o, err := f.Open(ctx, opts)
	if err != nil {
		return err
	}
	defer o.Close()
	return fn(ctx, o)
}
