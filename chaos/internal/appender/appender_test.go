package appender

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/servers"
	"github.com/outboxrelay/outbox/internal/mysqlurl"
	"github.com/outboxrelay/outbox/internal/testenv"
)

func randHex() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// syncBuffer is a bytes.Buffer safe for the concurrent writers of stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pgPool connects to the test PostgreSQL or skips.
func pgPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, testenv.PostgresURL())
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(p.Close)
	return p
}

// pgOutbox creates an outbox with the given partitions in a new schema,
// dropped when t ends, as "outbox migrate up" does.
func pgOutbox(t *testing.T, p *pgxpool.Pool, partitions int) string {
	t.Helper()
	schema := "chaos_appender_" + randHex()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping %s: %v", schema, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := pgoutbox.Migrate(ctx, p, pgoutbox.Options{Schema: schema, Partitions: partitions}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return schema
}

// pgIDs returns the IDs in the outbox table.
func pgIDs(t *testing.T, p *pgxpool.Pool, schema string) map[string]bool {
	t.Helper()
	rows, err := p.Query(context.Background(), "SELECT id FROM "+pgx.Identifier{schema, "outbox"}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// redisClient connects to the test Redis or skips.
func redisClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatalf("OUTBOX_REDIS_URL: %v", err)
	}
	return pingRedis(t, redis.NewClient(opt), "Redis", "OUTBOX_REDIS_URL")
}

// redisClusterClient connects to the test Redis Cluster or skips.
func redisClusterClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	addrs := testenv.RedisClusterAddrs()
	if addrs == nil {
		testenv.Unavailable(t, "Redis Cluster", "OUTBOX_REDIS_CLUSTER_ADDRS",
			errors.New("OUTBOX_REDIS_CLUSTER_ADDRS is unset; start one with scripts/redis-cluster.sh start and set it to 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"))
	}
	return pingRedis(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}), "Redis Cluster", "OUTBOX_REDIS_CLUSTER_ADDRS")
}

func pingRedis(t *testing.T, c redis.UniversalClient, service, variable string) redis.UniversalClient {
	t.Helper()
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, service, variable, err)
	}
	return c
}

// redisOutbox creates an outbox at a new prefix, its keys deleted when t
// ends, and returns the prefix and a Backend on it.
func redisOutbox(t *testing.T, c redis.UniversalClient, partitions int) (string, *redisoutbox.Backend) {
	t.Helper()
	tag := "chaosap" + randHex()
	prefix := "test:{" + tag + "}"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := redisoutbox.New(ctx, c, redisoutbox.Options{Prefix: prefix, Partitions: partitions})
	if err != nil {
		t.Fatalf("redisoutbox.New: %v", err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, "test:{"+tag+"*", 100).Iterator()
			for iter.Next(ctx) {
				_ = c.Del(ctx, iter.Val()).Err()
			}
			return nil
		}
		switch c := c.(type) {
		case *redis.ClusterClient:
			_ = c.ForEachMaster(ctx, del)
		case *redis.Client:
			_ = del(ctx, c)
		}
	})
	return prefix, b
}

// runFor runs the appender for d, calling during (if not nil) meanwhile,
// and returns its counters and stderr.
func runFor(t *testing.T, args []string, d time.Duration, during func(ctx context.Context)) (*stats, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var stderr syncBuffer
	var (
		st  *stats
		err error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		st, err = run(ctx, args, &stderr)
	}()
	if during != nil {
		during(ctx)
	}
	select {
	case <-done:
	case <-time.After(d + 15*time.Second):
		t.Fatalf("appender did not return 15s after its context ended; stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("run: %v; stderr:\n%s", err, stderr.String())
	}
	return st, stderr.String()
}

// runWhile runs the appender until during returns (or limit passes, which
// fails t), then stops it as runFor does.
func runWhile(t *testing.T, args []string, limit time.Duration, during func(ctx context.Context)) (*stats, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var stderr syncBuffer
	var (
		st  *stats
		err error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		st, err = run(ctx, args, &stderr)
	}()
	during(ctx)
	if ctx.Err() != nil {
		t.Errorf("the run took longer than %v", limit)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("appender did not return 15s after its context ended; stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("run: %v; stderr:\n%s", err, stderr.String())
	}
	return st, stderr.String()
}

// countAppends counts the append lines of a history file (flushed line by
// line).
func countAppends(file string) int64 {
	b, _ := os.ReadFile(file)
	return int64(bytes.Count(b, []byte(`"op":"append"`)))
}

// waitAppends waits until file has more than n append lines and returns
// their count, or returns n when ctx ends first.
func waitAppends(ctx context.Context, file string, n int64) int64 {
	for ctx.Err() == nil {
		if c := countAppends(file); c > n {
			return c
		}
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// recorded is what a history file says.
type recorded struct {
	appended []history.Entry  // confirmed, in append order
	unknown  map[string]int64 // ID -> seq of entries never confirmed
	key      map[string]string
}

func readHistory(t *testing.T, file string) recorded {
	t.Helper()
	h, err := history.ReadFiles(file)
	if err != nil {
		t.Fatalf("ReadFiles: %v", err)
	}
	// With no deliveries every confirmed entry is "lost": the list of them.
	r := recorded{appended: h.Check().Lost, unknown: map[string]int64{}, key: map[string]string{}}
	confirmed := map[string]bool{}
	for _, e := range r.appended {
		confirmed[e.ID] = true
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			Op, ID, Key string
			Seq         int64
			Partition   *int32
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("history line %q: %v", sc.Text(), err)
		}
		if l.Partition == nil {
			t.Errorf("history line %q has no partition", sc.Text())
		}
		r.key[l.ID] = l.Key
		if l.Op == history.OpUnknown && !confirmed[l.ID] {
			r.unknown[l.ID] = l.Seq
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkHistory checks per key that the confirmed entries are seq 1..n in
// commit order with IDs KEY-SEQ, that an unconfirmed entry is n+1 at
// most, and that the keys are the appender's; it returns how many keys
// have entries.
func checkHistory(t *testing.T, r recorded, name string, keys, partitions int) int {
	t.Helper()
	last := map[string]int64{}
	for _, e := range r.appended {
		if !strings.HasPrefix(e.Key, name+"-k") {
			t.Errorf("entry %s has key %q, not one of %s's", e.ID, e.Key, name)
		}
		if want := fmt.Sprintf("%s-%d", e.Key, e.Seq); e.ID != want {
			t.Errorf("entry ID %q, want %q", e.ID, want)
		}
		if e.Seq != last[e.Key]+1 {
			t.Errorf("key %s: seq %d recorded after seq %d", e.Key, e.Seq, last[e.Key])
		}
		last[e.Key] = e.Seq
		if want := int32(outbox.PartitionOf(e.Key, partitions)); e.Partition == nil || *e.Partition != want {
			t.Errorf("entry %s: partition %v, want %d", e.ID, e.Partition, want)
		}
		if e.At.IsZero() {
			t.Errorf("entry %s has no time", e.ID)
		}
	}
	for id, seq := range r.unknown {
		if k := r.key[id]; seq != last[k]+1 {
			t.Errorf("unconfirmed entry %s has seq %d, key %s's last confirmed is %d", id, seq, k, last[k])
		}
	}
	if len(last) > keys {
		t.Errorf("%d keys appended, want at most %d", len(last), keys)
	}
	return len(last)
}

func TestPostgresAppendsEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	p := pgPool(t)
	schema := pgOutbox(t, p, 4)
	name := "pg" + randHex()
	file := filepath.Join(t.TempDir(), "appender.jsonl")
	st, stderr := runFor(t, []string{
		"-store", testenv.PostgresURL(), "-schema", schema, "-name", name, "-keys", "10",
		"-topic", "chaos", "-workers", "2", "-history", file,
	}, time.Second, nil)

	r := readHistory(t, file)
	if len(r.appended) < 20 {
		t.Fatalf("only %d entries appended in 1s; stderr:\n%s", len(r.appended), stderr)
	}
	if n := checkHistory(t, r, name, 10, 4); n != 10 {
		t.Errorf("%d keys appended, want 10", n)
	}
	inStore := pgIDs(t, p, schema)
	for _, e := range r.appended {
		if !inStore[e.ID] {
			t.Errorf("appended entry %s is not in the outbox", e.ID)
		}
	}
	checkNoStrays(t, inStore, r)
	if got := st.appended.Load(); got != int64(len(r.appended)) {
		t.Errorf("counted %d appends, history has %d", got, len(r.appended))
	}
	if !strings.Contains(stderr, "summary after") {
		t.Errorf("no summary on stderr:\n%s", stderr)
	}
	t.Logf("appended %d, unknown %d, retries %d", st.appended.Load(), st.unknown.Load(), st.retries.Load())
}

// checkNoStrays checks that every stored entry is in the history.
func checkNoStrays(t *testing.T, inStore map[string]bool, r recorded) {
	t.Helper()
	known := map[string]bool{}
	for _, e := range r.appended {
		known[e.ID] = true
	}
	for id := range r.unknown {
		known[id] = true
	}
	for id := range inStore {
		if !known[id] {
			t.Errorf("the outbox holds %s, which the history does not know", id)
		}
	}
}

func TestRedisAppendsEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	testRedis(t, redisClient(t), testenv.RedisURL())
}

func TestRedisClusterAppendsEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	testRedis(t, redisClusterClient(t), "redis+cluster://"+strings.Join(testenv.RedisClusterAddrs(), ","))
}

func testRedis(t *testing.T, c redis.UniversalClient, storeURL string) {
	prefix, b := redisOutbox(t, c, 4)
	name := "rd" + randHex()
	file := filepath.Join(t.TempDir(), "appender.jsonl")
	const rate = 1000
	start := time.Now()
	st, stderr := runFor(t, []string{
		"-store", storeURL, "-prefix", prefix, "-name", name, "-keys", "10",
		"-topic", "chaos", "-workers", "2", "-rate", fmt.Sprint(rate), "-history", file,
		"-payload-bytes", "10",
	}, time.Second, nil)
	elapsed := time.Since(start)

	r := readHistory(t, file)
	if len(r.appended) < 100 {
		t.Fatalf("only %d entries appended in 1s at -rate %d; stderr:\n%s", len(r.appended), rate, stderr)
	}
	// Open loop pacing: never ahead of the schedule.
	if max := int(elapsed.Seconds()*rate) + 2; len(r.appended) > max {
		t.Errorf("%d entries appended in %v at -rate %d, want at most %d", len(r.appended), elapsed, rate, max)
	}
	if n := checkHistory(t, r, name, 10, 4); n != 10 {
		t.Errorf("%d keys appended, want 10", n)
	}
	ctx := context.Background()
	inStore := map[string]bool{}
	for _, e := range r.appended {
		info, err := b.Lookup(ctx, e.ID)
		if err != nil {
			t.Errorf("appended entry %s: %v", e.ID, err)
			continue
		}
		inStore[e.ID] = true
		if info.Key != e.Key || info.Topic != "chaos" || len(info.Payload) != 10 || info.Partition != int(*e.Partition) {
			t.Errorf("entry %s stored as key %q topic %q payload %d bytes partition %d", e.ID, info.Key, info.Topic, len(info.Payload), info.Partition)
		}
	}
	s, err := b.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := int(s.Pending); n < len(r.appended) || n > len(r.appended)+len(r.unknown) {
		t.Errorf("the outbox holds %d entries, the history %d confirmed and %d unknown", s.Pending, len(r.appended), len(r.unknown))
	}
	t.Logf("appended %d in %v, unknown %d, retries %d", st.appended.Load(), elapsed, st.unknown.Load(), st.retries.Load())
}

// The appender's PostgreSQL sessions are terminated several times while it
// runs: it retries, keeps appending, and the history holds exactly what
// the outbox holds.
func TestPostgresSurvivesTerminatedConnections(t *testing.T) {
	t.Parallel()
	p := pgPool(t)
	schema := pgOutbox(t, p, 4)
	name := "pgkill" + randHex()
	file := filepath.Join(t.TempDir(), "appender.jsonl")
	const kills = 6
	var (
		terminated int
		progress   []int64 // appends counted at each kill
		st         *stats
	)
	countAppends := func() int64 {
		// The history file is flushed line by line.
		b, _ := os.ReadFile(file)
		return int64(bytes.Count(b, []byte(`"op":"append"`)))
	}
	st, stderr := runFor(t, []string{
		"-store", testenv.PostgresURL(), "-schema", schema, "-name", name, "-keys", "10",
		"-topic", "chaos", "-workers", "2", "-history", file,
	}, 3500*time.Millisecond, func(ctx context.Context) {
		time.Sleep(500 * time.Millisecond)
		for range kills {
			progress = append(progress, countAppends())
			var n int
			err := p.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n)
			if err != nil {
				t.Errorf("pg_terminate_backend: %v", err)
				return
			}
			terminated += n
			time.Sleep(400 * time.Millisecond)
		}
		progress = append(progress, countAppends())
	})
	if terminated < kills {
		t.Errorf("terminated %d sessions in %d rounds, want at least one per round", terminated, kills)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] <= progress[i-1] {
			t.Errorf("no append between kill %d and %d (appends counted: %v); stderr:\n%s", i, i+1, progress, stderr)
		}
	}
	if st.retries.Load() == 0 {
		t.Errorf("no retries after %d terminated sessions; stderr:\n%s", terminated, stderr)
	}

	r := readHistory(t, file)
	checkHistory(t, r, name, 10, 4)
	inStore := pgIDs(t, p, schema)
	for _, e := range r.appended {
		if !inStore[e.ID] {
			t.Errorf("appended entry %s is not in the outbox", e.ID)
		}
	}
	checkNoStrays(t, inStore, r)
	t.Logf("terminated %d sessions; appended %d, unknown %d (%d at exit), retries %d; appends at each kill %v",
		terminated, st.appended.Load(), st.unknown.Load(), st.unresolved.Load(), st.retries.Load(), progress)
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	full := filepath.Join(dir, "full.jsonl")
	if err := os.WriteFile(full, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := map[string]string{
		"-store": "redis://127.0.0.1:1/0", "-name": "a1", "-keys": "4", "-topic": "t",
		"-history": filepath.Join(dir, "h.jsonl"),
	}
	args := func(kv ...string) []string {
		m := maps.Clone(good)
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<unset>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		var out []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out = append(out, k, m[k])
		}
		return out
	}
	for _, c := range []struct {
		name string
		args []string
		want string // a substring of the error
	}{
		{"NoStore", args("-store", "<unset>"), "-store"},
		{"NoName", args("-name", "<unset>"), "-name"},
		{"BadName", args("-name", "a b"), "-name"},
		{"LongName", args("-name", strings.Repeat("n", 49)), "-name"},
		{"NoKeys", args("-keys", "<unset>"), "-keys"},
		{"ZeroKeys", args("-keys", "0"), "-keys"},
		{"KeysNotANumber", args("-keys", "many"), "-keys"},
		{"NoTopic", args("-topic", "<unset>"), "-topic"},
		{"NegativeRate", args("-rate", "-1"), "-rate"},
		{"RateNotANumber", args("-rate", "fast"), "-rate"},
		{"ZeroWorkers", args("-workers", "0"), "-workers"},
		{"MoreWorkersThanKeys", args("-workers", "5"), "-workers"},
		{"NoHistory", args("-history", "<unset>"), "-history"},
		{"HistoryNotEmpty", args("-history", full), "-history"},
		{"NegativePayload", args("-payload-bytes", "-1"), "-payload-bytes"},
		{"ZeroTimeout", args("-timeout", "0s"), "-timeout"},
		{"UnknownFlag", append(args(), "-bogus", "1"), "-bogus"},
		{"Positional", append(args(), "extra"), "extra"},
		{"StoreNoScheme", args("-store", "localhost:5432"), "-store"},
		{"StoreUnknownScheme", args("-store", "mysql://localhost/db"), "mysql"},
		{"StoreNotAURL", args("-store", "postgres://u:secret@host:badport/db"), "-store"},
		{"StoreBadRedisURL", args("-store", "redis://127.0.0.1:1/notadb"), "-store"},
		{"StoreClusterNoNodes", args("-store", "redis+cluster://"), "-store"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stderr syncBuffer
			_, err := run(context.Background(), c.args, &stderr)
			if err == nil {
				t.Fatalf("run %q: no error", c.args)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("run %q: %v; want it to name %s", c.args, err, c.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
	t.Run("Help", func(t *testing.T) {
		t.Parallel()
		var stderr syncBuffer
		if _, err := run(context.Background(), []string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("-h: %v, want flag.ErrHelp", err)
		}
		if !strings.Contains(stderr.String(), "-payload-bytes") {
			t.Errorf("-h printed no usage:\n%s", stderr.String())
		}
	})
}

func TestUnreachableStoreFails(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "h.jsonl")
	for _, store := range []string{"postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=1", "redis://127.0.0.1:1/0", "mysql://root@127.0.0.1:1/x?timeout=1s"} {
		var stderr syncBuffer
		_, err := run(context.Background(), []string{"-store", store, "-name", "x", "-keys", "1", "-topic", "t", "-history", file, "-timeout", "2s"}, &stderr)
		if err == nil || !strings.Contains(err.Error(), "opening the outbox") {
			t.Errorf("%s: %v, want an error opening the outbox", store, err)
		}
		if _, err := os.Stat(file); err == nil {
			t.Errorf("%s: history file created although the store did not open", store)
		}
	}
}

func TestCommitOutcome(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		err        error
		rolledBack bool
	}{
		{"CommitOfFailedTx", pgx.ErrTxCommitRollback, true},
		{"ServerError", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "40001"}, true},
		{"LocalizedServerError", &pgconn.PgError{Severity: "ERROR", Code: "23505"}, true},
		{"Terminated", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}, false},
		{"ConnectionLost", io.ErrUnexpectedEOF, false},
		{"Timeout", context.DeadlineExceeded, false},
	} {
		if got := pgRolledBack(c.err); got != c.rolledBack {
			t.Errorf("%s: pgRolledBack = %v, want %v", c.name, got, c.rolledBack)
		}
	}
	for _, c := range []struct {
		name    string
		err     error
		aborted bool
	}{
		{"WatchConflict", redis.TxFailedErr, true},
		{"ExecAbort", errors.New("EXECABORT Transaction discarded because of previous errors."), true},
		{"CrossSlot", errors.New("CROSSSLOT Keys in request don't hash to the same slot"), true},
		{"ConnectionLost", io.EOF, false},
		{"Timeout", context.DeadlineExceeded, false},
	} {
		if got := redisAborted(nil, c.err); got != c.aborted {
			t.Errorf("%s: redisAborted = %v, want %v", c.name, got, c.aborted)
		}
	}
	for _, c := range []struct {
		name       string
		err        error
		rolledBack bool
	}{
		{"Deadlock", &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}, true},
		{"TxDone", sql.ErrTxDone, true},
		{"ConnectionKilled", &mysql.MySQLError{Number: 1927, Message: "Connection was killed"}, false},
		{"Shutdown", &mysql.MySQLError{Number: 1053, Message: "Server shutdown in progress"}, false},
		{"InvalidConn", mysql.ErrInvalidConn, false},
		{"ConnectionLost", io.ErrUnexpectedEOF, false},
	} {
		if got := mysqlRolledBack(c.err); got != c.rolledBack {
			t.Errorf("%s: mysqlRolledBack = %v, want %v", c.name, got, c.rolledBack)
		}
	}
}

// mysqlOutbox creates a database holding an outbox with the given
// partitions, dropped when t ends, as "outbox migrate up" does, and
// returns its store URL, the database's name and a pool on it.
func mysqlOutbox(t *testing.T, partitions int) (string, string, *sql.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin, err := sql.Open("mysql", testenv.MySQLDSN(""))
	if err == nil {
		err = admin.PingContext(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "MySQL", "OUTBOX_MYSQL_URL", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	database := "chaos_appender_" + randHex()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+database+"`"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+database+"`"); err != nil {
			t.Errorf("dropping %s: %v", database, err)
		}
	})
	db, err := sql.Open("mysql", testenv.MySQLDSN(database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := mysqloutbox.Migrate(ctx, db, mysqloutbox.Options{Partitions: partitions}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	u, err := mysqlurl.WithDatabase(testenv.MySQLURL(), database, "")
	if err != nil {
		t.Fatal(err)
	}
	return u, database, db
}

// mysqlIDs returns the IDs in the outbox table.
func mysqlIDs(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "SELECT id FROM outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMySQLAppendsEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	storeURL, _, db := mysqlOutbox(t, 4)
	name := "my" + randHex()
	file := filepath.Join(t.TempDir(), "appender.jsonl")
	// The shared server flushes every commit and may be busy: the run
	// lasts until 40 entries are appended, 30 s at most.
	st, stderr := runWhile(t, []string{
		"-store", storeURL, "-name", name, "-keys", "10",
		"-topic", "chaos", "-workers", "2", "-history", file,
	}, 30*time.Second, func(ctx context.Context) {
		for n := int64(0); n < 40 && ctx.Err() == nil; {
			n = waitAppends(ctx, file, n)
		}
	})

	r := readHistory(t, file)
	if len(r.appended) < 40 {
		t.Fatalf("only %d entries appended; stderr:\n%s", len(r.appended), stderr)
	}
	if n := checkHistory(t, r, name, 10, 4); n != 10 {
		t.Errorf("%d keys appended, want 10", n)
	}
	inStore := mysqlIDs(t, db)
	for _, e := range r.appended {
		if !inStore[e.ID] {
			t.Errorf("appended entry %s is not in the outbox", e.ID)
		}
	}
	checkNoStrays(t, inStore, r)
	if got := st.appended.Load(); got != int64(len(r.appended)) {
		t.Errorf("counted %d appends, history has %d", got, len(r.appended))
	}
	t.Logf("appended %d, unknown %d, retries %d", st.appended.Load(), st.unknown.Load(), st.retries.Load())
}

// TestMySQLSurvivesKilledConnections ends the appender's sessions with
// KILL CONNECTION again and again: it appends again within 10 s of each
// kill, every key in order, and every confirmed entry is in the outbox.
func TestMySQLSurvivesKilledConnections(t *testing.T) {
	t.Parallel()
	storeURL, database, db := mysqlOutbox(t, 4)
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	user := u.User.Username() // the appender's sessions are this user's
	name := "mykill" + randHex()
	file := filepath.Join(t.TempDir(), "appender.jsonl")
	const kills = 6
	var (
		killed   int
		progress []int64 // appends counted at each kill
	)
	// Each kill waits for an append after the previous one (at most 10 s:
	// the shared server flushes every commit and may be busy).
	st, stderr := runWhile(t, []string{
		"-store", storeURL, "-name", name, "-keys", "10",
		"-topic", "chaos", "-workers", "2", "-history", file,
	}, 90*time.Second, func(ctx context.Context) {
		// Kill only once the appender has opened the outbox (New on a
		// killed session fails the run, as it should) and appends.
		n := waitAppends(ctx, file, 0)
		for range kills {
			progress = append(progress, n)
			// The admin DSN names no database, so its own session is
			// never one of the database's.
			k, err := servers.KillConnections(ctx, testenv.MySQLDSN(""), servers.Sessions{User: user, Database: database}, 0)
			if err != nil {
				t.Errorf("KillConnections: %v", err)
				return
			}
			killed += k
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n = waitAppends(wctx, file, n)
			cancel()
		}
		progress = append(progress, n)
	})
	if killed < kills {
		t.Errorf("killed %d sessions in %d rounds, want at least one per round", killed, kills)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] <= progress[i-1] {
			t.Errorf("no append between kill %d and %d (appends counted: %v); stderr:\n%s", i, i+1, progress, stderr)
		}
	}
	r := readHistory(t, file)
	checkHistory(t, r, name, 10, 4)
	inStore := mysqlIDs(t, db)
	for _, e := range r.appended {
		if !inStore[e.ID] {
			t.Errorf("appended entry %s is not in the outbox", e.ID)
		}
	}
	checkNoStrays(t, inStore, r)
	t.Logf("killed %d sessions; appended %d, unknown %d (%d at exit), retries %d; appends at each kill %v",
		killed, st.appended.Load(), st.unknown.Load(), st.unresolved.Load(), st.retries.Load(), progress)
}

// -stamp-header puts each attempt's time in the header, just before the
// store is asked: the soak measures commit-to-publish latency from it.
func TestStampHeaderCarriesTheAppendTime(t *testing.T) {
	t.Parallel()
	c := redisClient(t)
	prefix, b := redisOutbox(t, c, 2)
	file := filepath.Join(t.TempDir(), "appender.jsonl")
	before := time.Now()
	runFor(t, []string{
		"-store", testenv.RedisURL(), "-prefix", prefix, "-name", "st" + randHex(), "-keys", "4",
		"-topic", "chaos", "-rate", "200", "-history", file, "-stamp-header", "soak-stamp",
	}, 500*time.Millisecond, nil)
	after := time.Now()
	r := readHistory(t, file)
	if len(r.appended) == 0 {
		t.Fatal("nothing appended")
	}
	for _, e := range r.appended {
		info, err := b.Lookup(context.Background(), e.ID)
		if err != nil {
			t.Fatalf("Lookup %s: %v", e.ID, err)
		}
		ns, err := strconv.ParseInt(info.Headers["soak-stamp"], 10, 64)
		if err != nil {
			t.Fatalf("entry %s: header soak-stamp %q: %v", e.ID, info.Headers["soak-stamp"], err)
		}
		if at := time.Unix(0, ns); at.Before(before) || at.After(e.At) || at.After(after) {
			t.Errorf("entry %s stamped %v, not between the start %v and its commit %v", e.ID, at, before, e.At)
		}
	}
}
