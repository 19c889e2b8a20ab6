package app

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// secretStore is an outbox whose store URL holds a password.
type secretStore struct {
	url     string   // with the password
	secrets []string // the password as written and decoded
	name    []string // --schema or --prefix
	kind    string
}

// redisSecretStore starts a Redis with a password that needs
// percent-encoding in the URL, and makes an outbox with a parked entry.
func redisSecretStore(t *testing.T) secretStore {
	const pass = "Sup3r/Secret@Redis-9k"
	port := privateRedis(t, "port", "requirepass "+pass)
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Password: pass})
	t.Cleanup(func() { _ = client.Close() })
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: "{sec}", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	seedSecret(t, b, func(e ...outbox.Entry) error { return b.Append(ctx, e...) })
	u := fmt.Sprintf("redis://:%s@127.0.0.1:%d/0", url.PathEscape(pass), port)
	return secretStore{url: u, secrets: []string{pass, url.PathEscape(pass), url.QueryEscape(pass)}, name: []string{"--prefix", "{sec}"}, kind: "redis"}
}

// postgresSecretStore makes an outbox in a schema of its own and a URL
// with a password: the test server's own, or one it ignores (a server
// that trusts local connections accepts any).
func postgresSecretStore(t *testing.T) secretStore {
	ctx := context.Background()
	base, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	opts := pgoutbox.Options{Schema: schema, Partitions: 1}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	seedSecret(t, b, func(e ...outbox.Entry) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, e...) })
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	pass, ok := u.User.Password()
	if !ok {
		pass = "Pg/Secret@Pass-4u"
		u.User = url.UserPassword(u.User.Username(), pass)
	}
	return secretStore{url: u.String(), secrets: []string{pass, url.PathEscape(pass), url.QueryEscape(pass)}, name: []string{"--schema", schema}, kind: "postgres"}
}

// mysqlSecretStore makes an outbox in a database of its own, reached as
// a user whose password needs percent-encoding in the URL.
func mysqlSecretStore(t *testing.T) secretStore {
	u, b, _, appendFn := cliMySQLOutbox(t, mysqloutbox.Options{Table: "sec_outbox", Partitions: 1})
	seedSecret(t, b, appendFn)
	return secretStore{url: u, secrets: []string{mysqlTestPassword, url.PathEscape(mysqlTestPassword), url.QueryEscape(mysqlTestPassword)},
		name: []string{"--table", "sec_outbox"}, kind: "mysql"}
}

// seedSecret appends e1 (parked) and e2 (pending).
func seedSecret(t *testing.T, store outbox.Store, appendFn func(...outbox.Entry) error) {
	t.Helper()
	ctx := context.Background()
	if err := appendFn(outbox.Entry{ID: "e1", Topic: "t", Key: "k"}, outbox.Entry{ID: "e2", Topic: "t", Key: "k2"}); err != nil {
		t.Fatal(err)
	}
	lease, err := store.AcquireLease(ctx, 0, "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.FindPendingBatch(ctx, lease, 10); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkFailed(ctx, lease, []outbox.Failure{{ID: "e1", Error: "boom", Park: true}}); err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, lease, []string{"e2"}); err != nil {
		t.Fatal(err)
	}
	if err := store.ReleaseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
}

// secretRuns are the command lines every source of the store URL is tried
// with: help of each command, each command's normal path and the error
// paths that are cheap to reach. The store flags are added by the caller.
func secretRuns(s secretStore, full bool) [][]string {
	if !full { // one normal path per command, the help of each
		runs := [][]string{{"status"}, {"parked", "--full-error"}, {"show", "e1"}, {"requeue", "--all"}, {"cancel", "nope"},
			{"migrate", "status"}, {"migrate", "up", "--partitions", "7"}, {"purge", "--before", "1h"}}
		for i := range runs {
			runs[i] = append(runs[i], s.name...)
		}
		for _, cmd := range []string{"migrate up", "migrate down", "migrate status", "migrate sql", "status", "parked", "show", "requeue", "cancel", "purge", "demo", "version"} {
			runs = append(runs, append(strings.Fields(cmd), "--help"))
		}
		return runs
	}
	runs := [][]string{
		{"--help"}, {"help", "stores"}, {"help", "config"}, {"version"},
		{"status"}, {"status", "-o", "json"},
		{"parked"}, {"parked", "-o", "json"}, {"parked", "--full-error", "--topic", "t"},
		{"show", "e1"}, {"show", "e1", "-o", "json"}, {"show", "nope"},
		{"requeue", "--all", "--dry-run"}, {"requeue", "--all"}, {"requeue", "nope"},
		{"cancel", "--all", "--dry-run"}, {"cancel", "--all"}, {"cancel", "nope"},
		{"migrate", "status"}, {"migrate", "status", "-o", "json"}, {"migrate", "up"}, {"migrate", "up", "--partitions", "7"},
		{"migrate", "down"}, {"migrate", "sql", "--partitions", "2"}, {"purge", "--before", "1h"},
		{"status", "--nope"}, {"status", "extra-argument"},
	}
	for _, cmd := range []string{"migrate up", "migrate down", "migrate status", "migrate sql", "status", "parked", "show", "requeue", "cancel", "purge", "demo", "version"} {
		runs = append(runs, append(strings.Fields(cmd), "--help"))
	}
	for i := range runs {
		if runs[i][0] != "help" && runs[i][0] != "--help" && runs[i][0] != "version" {
			runs[i] = append(runs[i], s.name...)
		}
	}
	return runs
}

// checkNoSecret fails when any output holds one of the secrets.
func checkNoSecret(t *testing.T, secrets []string, args []string, r cliResult) {
	t.Helper()
	for _, sec := range secrets {
		if strings.Contains(r.stdout+r.stderr, sec) {
			t.Errorf("outbox %s printed the password %q:\n%v", strings.Join(args, " "), sec, r)
		}
	}
}

// TestNoSecretInOutput runs every command with the store URL, password
// included, given as a flag and in the config file, and searches
// everything printed for the password.
func TestNoSecretInOutput(t *testing.T) {
	t.Parallel()
	for _, mk := range []func(*testing.T) secretStore{redisSecretStore, postgresSecretStore, mysqlSecretStore} {
		s := mk(t)
		file := filepath.Join(t.TempDir(), "outbox.yaml")
		if err := os.WriteFile(file, []byte("store: "+s.url+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, source := range []struct {
			name  string
			flags []string
		}{{"Flag", []string{"--store", s.url}}, {"ConfigFile", []string{"--config", file}}} {
			t.Run(s.kind+"/"+source.name, func(t *testing.T) {
				t.Parallel()
				if os.Getenv("OUTBOX_STORE") != "" {
					t.Skip("OUTBOX_STORE is set in the environment and would override the config file")
				}
				okRuns := 0
				for _, args := range secretRuns(s, true) {
					args = append(args, source.flags...)
					r := runCLI(t, args...)
					checkNoSecret(t, s.secrets, args, r)
					if r.code == 0 && (args[0] == "status" || args[0] == "parked") {
						okRuns++
					}
				}
				if okRuns < 4 {
					t.Fatalf("only %d status/parked runs succeeded: the store URL did not reach the commands", okRuns)
				}
			})
		}
	}
}

// TestNoSecretInOutputFromEnv is TestNoSecretInOutput with the URL in
// OUTBOX_STORE (not parallel: it sets the variable), and checks that no
// help text shows the variable's value.
func TestNoSecretInOutputFromEnv(t *testing.T) {
	for _, mk := range []func(*testing.T) secretStore{redisSecretStore, postgresSecretStore, mysqlSecretStore} {
		s := mk(t)
		t.Run(s.kind, func(t *testing.T) {
			t.Setenv("OUTBOX_STORE", s.url)
			okRuns := 0
			for _, args := range secretRuns(s, false) {
				r := runCLI(t, args...)
				checkNoSecret(t, s.secrets, args, r)
				if r.code == 0 && args[0] == "status" {
					okRuns++
				}
				if strings.Contains(strings.Join(args, " "), "--help") && strings.Contains(r.stdout, "OUTBOX_STORE") && strings.Contains(r.stdout, "127.0.0.1") {
					t.Errorf("outbox %s shows the value of OUTBOX_STORE:\n%s", strings.Join(args, " "), r.stdout)
				}
			}
			if okRuns < 1 {
				t.Fatalf("only %d status runs succeeded: OUTBOX_STORE did not reach the commands", okRuns)
			}
		})
	}
}

// TestNoSecretInErrors: the error paths that echo what they were given
// (a URL without a scheme, an unknown scheme, a URL where an argument
// goes, bad parameters, a bad config file, an unreachable server) never
// print the password.
func TestNoSecretInErrors(t *testing.T) {
	t.Parallel()
	const pw = "Leak-Me-Not-77"
	cfgBad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(cfgBad, []byte("store: redis://:"+pw+"@h\n  nested: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgUnknown := filepath.Join(t.TempDir(), "unknown.yaml")
	if err := os.WriteFile(cfgUnknown, []byte("store: redis://:"+pw+"@h\nkafka-sasl-pasword: "+pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runs := [][]string{
		{"status", "--store", "app:" + pw + "@db.internal/app"},
		{"status", "--store", "foo://u:" + pw + "@h/db"},
		{"status", "postgres://u:" + pw + "@h/db"},
		{"status", "--store", "redis://u:" + pw + "@127.0.0.1:1/0?no_such_param=1"},
		{"status", "--store", "redis://u:" + pw + "@127.0.0.1:1,127.0.0.1:2/0"},
		{"status", "--store", "rediss://u:" + pw + "@127.0.0.1:1/0?tls_ca=/no/such/file"},
		{"status", "--store", "postgres://u:" + pw + "@127.0.0.1:1/db?sslmode=bogus"},
		{"status", "--store", "postgres://u:" + pw + "@127.0.0.1:1/db?sslmode=disable", "--timeout", "1s"},
		{"status", "--store", "postgres://u@127.0.0.1:1/db?sslmode=disable&password=" + pw, "--timeout", "1s"},
		{"status", "--store", "redis://" + pw + "@127.0.0.1:1/0", "--timeout", "1s"},
		{"status", "--store", "redis+sentinel://127.0.0.1:1/m?sentinel_password=" + pw, "--timeout", "1s"},
		{"status", "--store", "redis+cluster://u:" + pw + "@127.0.0.1:1/3"},
		{"status", "--store", "mysql://u:" + pw + "@127.0.0.1:1/db", "--timeout", "1s"},
		{"status", "--store", "mysql://u:" + pw + "@127.0.0.1:1/db?sslmode=bogus"},
		{"status", "--store", "mysql://u:" + pw + "@127.0.0.1:1"},
		{"status", "--store", "mysql://u:" + pw + "@127.0.0.1:1/db?multiStatements=true"},
		{"status", "--store", "mysql://u:" + pw + "@127.0.0.1:1/db?password=" + pw},
		{"status", "--store", "mariadb://u:" + pw + "@127.0.0.1:1/db?sslrootcert=/no/such/file"},
		{"status", "--store", "u:" + pw + "@tcp(127.0.0.1:1)/db"},
		{"status", "--config", cfgBad},
		{"status", "--config", cfgUnknown},
	}
	for i, args := range runs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, args...)
			if r.code == 0 {
				t.Errorf("outbox %s succeeded: %v", strings.Join(args, " "), r)
			}
			checkNoSecret(t, []string{pw}, args, r)
		})
	}
}
