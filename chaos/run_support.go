package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/chaos/internal/proc"
	"github.com/outboxrelay/outbox/chaos/internal/servers"
)

// What a run needs around it: the shared stores' checks and cleanup, the
// summaries of the processes' logs, the error of a missing service, and
// what the scenarios and the soak share to run the outbox CLI and to stop
// and check their processes.

func dropSchema(pgURL, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
}

// dropRedisKeys deletes the keys of a run's prefix (the hash tag holds
// the run's ID, so the pattern matches no one else's keys).
func dropRedisKeys(redisURL, tag string) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	it := c.Scan(ctx, 0, "{"+tag+"*", 1000).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		_ = c.Del(ctx, keys[:n]...).Err()
		keys = keys[n:]
	}
}

// appenderSummaries returns the summary line each appender printed at
// exit (appended, commits of unknown outcome, retries, errors by kind).
func appenderSummaries(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "app*.log"))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.Index(line, ": summary after "); i >= 0 {
				if j := strings.Index(line, "appender "); j >= 0 && j < i {
					out = append(out, line[j:])
				}
			}
		}
	}
	return out
}

// logCount is how often the relays logged one message at one level.
type logCount struct {
	Level, Msg string
	N          int
}

// relayLogSummary counts the warnings and errors the run's relays logged
// (JSON lines), most frequent first: what the relays saw of the faults.
func relayLogSummary(dir string) []logCount {
	files, _ := filepath.Glob(filepath.Join(dir, "relay-*.log"))
	counts := map[[2]string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			var l struct{ Level, Msg string }
			if json.Unmarshal([]byte(line), &l) != nil || (l.Level != "WARN" && l.Level != "ERROR") {
				continue
			}
			counts[[2]string{l.Level, l.Msg}]++
		}
	}
	out := make([]logCount, 0, len(counts))
	for k, n := range counts {
		out = append(out, logCount{Level: k[0], Msg: k[1], N: n})
	}
	slices.SortFunc(out, func(a, b logCount) int { return cmp.Or(b.N-a.N, strings.Compare(a.Msg, b.Msg)) })
	return out
}

// missingError is a service or program the scenario needs and this
// machine lacks: the scenario is skipped, or fails under
// OUTBOX_REQUIRE_SERVICES=1.
type missingError struct{ msg string }

func (e *missingError) Error() string { return e.msg }

func notInstalled(err error) error {
	if errors.Is(err, servers.ErrNotInstalled) {
		return &missingError{err.Error()}
	}
	return err
}

func pingPostgres(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

func pingRedis(ctx context.Context, u string) error {
	opt, err := redis.ParseURL(u)
	if err != nil {
		return err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// runOutbox runs the outbox binary bin with args, a minute at most, and
// returns what it printed.
func runOutbox(ctx context.Context, bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, bin, args...).CombinedOutput()
}

// readStatus is `outbox status -o json` of the outbox at storeURL (with
// the --schema or --prefix of storeArgs).
func readStatus(ctx context.Context, bin, storeURL string, storeArgs ...string) (*statusJSON, error) {
	args := append([]string{"status", "-o", "json", "--timeout", "10s", "--store", storeURL}, storeArgs...)
	out, err := runOutbox(ctx, bin, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox status: %v: %s", err, out)
	}
	var s statusJSON
	if err := json.Unmarshal(out, &s); err != nil {
		return nil, fmt.Errorf("outbox status -o json: %v: %s", err, out)
	}
	return &s, nil
}

// terminateAll sends every process of ps SIGTERM at once and waits for
// each, up to grace, logging the ones that did not exit cleanly.
func terminateAll(ps []*proc.Proc, grace time.Duration, logf func(format string, args ...any)) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			if err := p.Terminate(grace); err != nil {
				logf("%s: %v", p.Name, err)
			}
		})
	}
	wg.Wait()
}

// exitedApp names the first appender of apps that exited: appenders run
// until the harness stops them, so one that exited failed (its log says
// why).
func exitedApp(apps []*proc.Proc) error {
	for _, p := range apps {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.Log)
		}
	}
	return nil
}
