package testenv

// Tests of scripts/services.sh and scripts/test.sh, the other half of the
// test environment: whatever they print lands in CI logs, so no password
// from a service URL may appear in it.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// script returns the path of scripts/name and the bash to run it with,
// or skips t when there is no bash.
func script(t *testing.T, name string) (bash, path string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on PATH: the scripts need it")
	}
	path, err = filepath.Abs(filepath.Join("..", "..", "scripts", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	return bash, path
}

// runScript runs a script with env on top of the test's environment (less
// the service variables), bounded so a hang fails instead of blocking.
func runScript(t *testing.T, bash string, args []string, env ...string) (out string, exit int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, args...)
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "OUTBOX_") && name != "PGPASSWORD" && name != "REDISCLI_AUTH" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	b, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%v did not finish within a minute:\n%s", args, b)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	default:
		t.Fatalf("%v: %v", args, err)
	}
	return string(b), exit
}

// toolsDir returns a directory holding links to the named tools only, for
// a PATH on which psql, redis-cli, apt-get and the servers are missing.
func toolsDir(t *testing.T, tools ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range tools {
		if p, err := exec.LookPath(tool); err == nil {
			if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func TestServicesScriptPrintsNoPassword(t *testing.T) {
	t.Parallel()
	bash, services := script(t, "services.sh")
	bare := "PATH=" + toolsDir(t, "sed", "id") // no psql, redis-cli, apt-get, servers
	for _, tc := range []struct {
		name    string
		args    []string
		env     []string
		secrets []string
		shown   []string // what must still be there: hosts, ports, users
	}{
		{
			name: "UnreachableURLs",
			args: []string{"check"},
			env: []string{
				"OUTBOX_POSTGRES_URL=postgres://postgres:PgSecret-q1W@127.0.0.1:1/postgres?sslmode=disable&password=PgQuerySecret-e2R",
				"OUTBOX_REDIS_URL=redis://:RedisSecret-t3Y@127.0.0.1:1/0",
				"OUTBOX_NATS_URL=nats://relay:NatsSecret-h5J@127.0.0.1:1",
				"OUTBOX_AMQP_URL=amqp://relay:AmqpSecret-k6L@127.0.0.1:1/outbox",
			},
			secrets: []string{"PgSecret-q1W", "PgQuerySecret-e2R", "RedisSecret-t3Y", "NatsSecret-h5J", "AmqpSecret-k6L"},
			shown: []string{"postgres://postgres:xxxxx@127.0.0.1:1/postgres", "redis://:xxxxx@127.0.0.1:1/0",
				"NATS NOT reachable at nats://relay:xxxxx@127.0.0.1:1", "RabbitMQ NOT reachable at amqp://relay:xxxxx@127.0.0.1:1/outbox"},
		},
		{
			name: "RedisUserAndKeywordDSN",
			args: []string{"check"},
			env: []string{
				"OUTBOX_POSTGRES_URL=host=127.0.0.1 port=1 user=postgres password=PgKeywordSecret-u4I dbname=postgres",
				"OUTBOX_REDIS_URL=redis://outbox:RedisUserSecret-o5P@127.0.0.1:1/2",
			},
			secrets: []string{"PgKeywordSecret-u4I", "RedisUserSecret-o5P"},
			shown:   []string{"host=127.0.0.1 port=1 user=postgres", "redis://outbox:xxxxx@127.0.0.1:1/2"},
		},
		{
			name:    "RedisLonePassword",
			args:    []string{"check"},
			env:     []string{"OUTBOX_REDIS_URL=rediss://RedisLoneSecret-a6S@127.0.0.1:1/0"},
			secrets: []string{"RedisLoneSecret-a6S"},
			shown:   []string{"rediss://xxxxx@127.0.0.1:1/0"},
		},
		{
			// Reachable or not on this machine, the local servers' ports
			// with passwords: either branch prints the URL.
			name: "LocalPorts",
			args: []string{"check"},
			env: []string{
				"OUTBOX_POSTGRES_URL=postgres://postgres:PgLocalSecret-d7F@127.0.0.1:5432/postgres?sslmode=disable",
				"OUTBOX_REDIS_URL=redis://default:RedisLocalSecret-g8H@127.0.0.1:6379/0",
			},
			secrets: []string{"PgLocalSecret-d7F", "RedisLocalSecret-g8H"},
			shown:   []string{"postgres://postgres:xxxxx@127.0.0.1:5432/postgres", "redis://default:xxxxx@127.0.0.1:6379/0"},
		},
		{
			name: "CheckWithoutTools",
			args: []string{"check"},
			env: []string{
				bare,
				"OUTBOX_POSTGRES_URL=postgres://postgres:PgSecret-j9K@127.0.0.1:1/postgres",
				"OUTBOX_REDIS_URL=redis://:RedisSecret-l0Z@127.0.0.1:1/0",
			},
			secrets: []string{"PgSecret-j9K", "RedisSecret-l0Z"},
			shown:   []string{"postgres://postgres:xxxxx@127.0.0.1:1/postgres", "redis://:xxxxx@127.0.0.1:1/0"},
		},
		{
			// Nothing to start without the servers: start reports with check.
			name: "StartWithoutTools",
			args: []string{"start"},
			env: []string{
				bare,
				"OUTBOX_POSTGRES_URL=postgres://postgres:PgSecret-x1C@127.0.0.1:1/postgres",
				"OUTBOX_REDIS_URL=redis://:RedisSecret-v2B@127.0.0.1:1/0",
			},
			secrets: []string{"PgSecret-x1C", "RedisSecret-v2B"},
			shown:   []string{"postgres://postgres:xxxxx@127.0.0.1:1/postgres", "redis://:xxxxx@127.0.0.1:1/0"},
		},
		{
			// Without apt-get, install stops at its error.
			name: "InstallWithoutAptGet",
			args: []string{"install"},
			env: []string{
				bare,
				"OUTBOX_POSTGRES_URL=postgres://postgres:PgSecret-n3M@127.0.0.1:1/postgres",
				"OUTBOX_REDIS_URL=redis://:RedisSecret-b4V@127.0.0.1:1/0",
			},
			secrets: []string{"PgSecret-n3M", "RedisSecret-b4V"},
			shown:   []string{"install needs root on Debian/Ubuntu"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, exit := runScript(t, bash, append([]string{services}, tc.args...), tc.env...)
			t.Logf("services.sh %s exited %d:\n%s", strings.Join(tc.args, " "), exit, out)
			if exit != 0 && exit != 1 {
				t.Errorf("exit status %d, want 0 (all reachable) or 1", exit)
			}
			for _, s := range tc.secrets {
				if strings.Contains(out, s) {
					t.Errorf("the output shows the password %q", s)
				}
			}
			for _, s := range tc.shown {
				if !strings.Contains(out, s) {
					t.Errorf("the output lacks %q", s)
				}
			}
		})
	}
}

func TestServicesScriptRedact(t *testing.T) {
	t.Parallel()
	bash, services := script(t, "services.sh")
	for _, tc := range []struct{ name, in, want string }{
		{"URLPassword",
			"at postgres://postgres:S3cretPW@127.0.0.1:5432/postgres?sslmode=disable.",
			"at postgres://postgres:xxxxx@127.0.0.1:5432/postgres?sslmode=disable."},
		{"URLWithoutPasswordUntouched",
			"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable redis://127.0.0.1:6379/0 http://[::1]:80/x",
			"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable redis://127.0.0.1:6379/0 http://[::1]:80/x"},
		{"RedisEmptyUser", "redis://:R3disPW@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"RedisUser", "redis://app:R3disPW@cache:6379/1", "redis://app:xxxxx@cache:6379/1"},
		{"RedisLoneUserInfoIsAPassword", "rediss://R3disPW@cache:6380 REDIS://R3disPW@cache", "rediss://xxxxx@cache:6380 REDIS://xxxxx@cache"},
		{"PostgresLoneUserIsAUser", "postgresql://app@db/x", "postgresql://app@db/x"},
		{"PasswordHoldingAt", "postgres://u:p@ss@[::1]:5432/db", "postgres://u:xxxxx@[::1]:5432/db"},
		{"QueryParameter", "postgres://db/x?sslmode=disable&password=Qpw&user=u", "postgres://db/x?sslmode=disable&password=xxxxx&user=u"},
		{"Keywords", "host=db password=Kw1 sslpassword = 'a b' PGPASSWORD=Env1 Password=\"c d\" user=u",
			"host=db password=xxxxx sslpassword = xxxxx PGPASSWORD=xxxxx Password=xxxxx user=u"},
		{"Quoted", "cannot parse `postgres://a:b@h/d`: \"redis://:c@h:1\"", "cannot parse `postgres://a:xxxxx@h/d`: \"redis://:xxxxx@h:1\""},
		{"Idempotent", "postgres://postgres:xxxxx@h/d redis://xxxxx@h", "postgres://postgres:xxxxx@h/d redis://xxxxx@h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bash, services, "redact")
			cmd.Stdin = strings.NewReader(tc.in + "\n")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("services.sh redact: %v", err)
			}
			if got := strings.TrimSuffix(string(out), "\n"); got != tc.want {
				t.Errorf("redact\n  %s\ngave\n  %s\nwant\n  %s", tc.in, got, tc.want)
			}
		})
	}
}

// TestTestScriptPrintsNoPassword runs scripts/test.sh with a stand-in for
// go that prints the service URLs on both streams, as a failing test or the
// benchmark harness can.
func TestTestScriptPrintsNoPassword(t *testing.T) {
	t.Parallel()
	bash, testScript := script(t, "test.sh")
	stubs := t.TempDir()
	// go build -o FILE makes a program that prints the URLs as well, as the
	// chaos harness (built and run by scripts/chaos.sh) can.
	stub := `#!/bin/sh
echo "go $*: $OUTBOX_POSTGRES_URL $OUTBOX_REDIS_URL"
echo "go $*: $OUTBOX_POSTGRES_URL $OUTBOX_REDIS_URL" >&2
prev=""
for a in "$@"; do
	if [ "$prev" = "-o" ]; then
		printf '#!/bin/sh\necho "built $*: $OUTBOX_POSTGRES_URL"\necho "built $*: $OUTBOX_REDIS_URL" >&2\n' >"$a"
		chmod +x "$a"
	fi
	prev="$a"
done
`
	if err := os.WriteFile(filepath.Join(stubs, "go"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	out, exit := runScript(t, bash, []string{testScript},
		"PATH="+stubs+string(os.PathListSeparator)+os.Getenv("PATH"),
		"OUTBOX_POSTGRES_URL=postgres://postgres:PgSecret-h5N@127.0.0.1:1/postgres?sslmode=disable",
		"OUTBOX_REDIS_URL=redis://:RedisSecret-k6J@127.0.0.1:1/0",
		"OUTBOX_REDIS_CLUSTER_ADDRS=127.0.0.1:1", // no cluster to start
	)
	t.Logf("test.sh exited %d:\n%s", exit, out)
	if exit != 0 {
		t.Errorf("exit status %d, want 0 (the stand-in for go succeeds)", exit)
	}
	for _, s := range []string{"PgSecret-h5N", "RedisSecret-k6J"} {
		if strings.Contains(out, s) {
			t.Errorf("the output shows the password %q", s)
		}
	}
	for _, s := range []string{"go test -race", "go run . -quick", "built -short:", "postgres://postgres:xxxxx@127.0.0.1:1/postgres", "redis://:xxxxx@127.0.0.1:1/0"} {
		if !strings.Contains(out, s) {
			t.Errorf("the output lacks %q", s)
		}
	}
}
