package app

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// cliResult is what one run of the CLI printed and returned.
type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// cliIO is the input and terminals of one run.
type cliIO struct {
	stdin                          string
	stdinTTY, stdoutTTY, stderrTTY bool
}

// runCLI runs the CLI with args, no terminal and empty input.
func runCLI(t testing.TB, args ...string) cliResult {
	t.Helper()
	return cliWith(t, cliIO{}, args...)
}

// cliWith runs the CLI with the given input and terminals.
func cliWith(t testing.TB, in cliIO, args ...string) cliResult {
	t.Helper()
	var out, errs bytes.Buffer
	app := &cli.App{Stdout: &out, Stderr: &errs, Stdin: strings.NewReader(in.stdin), Version: "test",
		StdinTerminal: in.stdinTTY, StdoutTerminal: in.stdoutTTY, StderrTerminal: in.stderrTTY}
	code := Run(args, app)
	return cliResult{code: code, stdout: out.String(), stderr: errs.String()}
}

// cliOK runs the CLI and fails the test unless it exits 0.
func cliOK(t testing.TB, args ...string) string {
	t.Helper()
	r := runCLI(t, args...)
	if r.code != 0 {
		t.Fatalf("outbox %s: %v", strings.Join(args, " "), r)
	}
	return r.stdout
}

// cliFails runs the CLI and fails the test unless it exits with code and
// its stderr holds every one of want.
func cliFails(t testing.TB, code int, want []string, args ...string) cliResult {
	t.Helper()
	r := runCLI(t, args...)
	if r.code != code {
		t.Fatalf("outbox %s: want exit %d, got %v", strings.Join(args, " "), code, r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("outbox %s: stderr lacks %q:\n%v", strings.Join(args, " "), w, r)
		}
	}
	return r
}

var cliSeq atomic.Int64

// uniqueName is a name no other test of this run uses.
func uniqueName(kind string) string {
	return fmt.Sprintf("cli_%s_%d_%d", kind, time.Now().UnixNano()%1e9, cliSeq.Add(1))
}

// cliPostgres returns the test server's URL and a pool, or skips.
func cliPostgres(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	url := testenv.PostgresURL()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close)
	return url, pool
}

// cliSchema returns a schema name of the test's own, dropped at its end.
func cliSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	schema := uniqueName("s")
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping the test's schema: %v", err)
		}
	})
	return schema
}

// cliRedis returns the test server's URL and a client, or skips.
func cliRedis(t testing.TB) (string, *redis.Client) {
	t.Helper()
	url := testenv.RedisURL()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Ping(context.Background()).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	return url, client
}

// cliPrefix returns a key prefix of the test's own, whose keys are deleted
// at its end.
func cliPrefix(t testing.TB, client redis.UniversalClient) string {
	t.Helper()
	tag := uniqueName("p")
	t.Cleanup(func() { deleteKeys(t, client, "*"+tag+"*") })
	return "{" + tag + "}"
}

func deleteKeys(t testing.TB, client redis.UniversalClient, pattern string) {
	ctx := context.Background()
	del := func(c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return del(c) })
	} else {
		err = del(client)
	}
	if err != nil {
		t.Errorf("deleting the test's keys: %v", err)
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// privateRedis starts a redis-server of the test's own on a free port of
// 127.0.0.1 with the given extra configuration lines ("requirepass x"),
// and stops it (by its PID) when the test ends. It returns the port. The
// port directive is "port" or, for TLS, "tls-port" (then port is 0).
func privateRedis(t testing.TB, portDirective string, conf ...string) int {
	t.Helper()
	return startRedis(t, portDirective, nil, conf)
}

// privateRedisMode is privateRedis with a command-line argument such as
// --sentinel.
func privateRedisMode(t testing.TB, arg string, conf ...string) int {
	t.Helper()
	return startRedis(t, "port", []string{arg}, conf)
}

func startRedis(t testing.TB, portDirective string, args, conf []string) int {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testenv.Required() {
			t.Fatalf("redis-server is not installed: %v", err)
		}
		t.Skipf("redis-server is not installed (%v): apt-get install redis-server", err)
	}
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		lines := []string{"bind 127.0.0.1", "dir " + dir, fmt.Sprintf("%s %d", portDirective, port)}
		if len(args) == 0 {
			lines = append(lines, "save \"\"", "appendonly no")
		}
		if portDirective != "port" {
			lines = append(lines, "port 0")
		}
		lines = append(lines, conf...)
		cfg := filepath.Join(dir, fmt.Sprintf("redis-%d.conf", attempt))
		if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		cmd := exec.Command(bin, append([]string{cfg}, args...)...)
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		up := false
		for i := 0; i < 200 && !up; i++ {
			select {
			case <-exited:
				i = 200
			default:
				if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 100*time.Millisecond); err == nil {
					c.Close()
					up = true
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
		if up {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			return port
		}
		_ = cmd.Process.Kill()
		<-exited
		if attempt == 2 {
			t.Fatalf("redis-server did not start on port %d: %s", port, logs.String())
		}
	}
}
