package app

// End-to-end tests of `outbox relay` as a process of its own, with a Kafka
// broker (kfake, internal/cmd/kfakebroker) as another process, against
// PostgreSQL, Redis and PostgreSQL behind a transaction-pooling PgBouncer.

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/relaycmd"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/internal/testenv"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// relayE2EDrain is the --drain-timeout the end-to-end relays run with; a
// relay must exit within it plus the documented ~3 s after SIGTERM.
const relayE2EDrain = 10 * time.Second

// TestRelayProcess runs `outbox relay` as its own process against each
// store, with the broker as another process. The binaries are built once,
// into this test's temporary directory, which its parallel subtests share.
func TestRelayProcess(t *testing.T) {
	bins := buildRelayBinaries(t)
	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		relayEndToEnd(t, bins, newPostgresE2E(t, bins, ""))
	})
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		relayEndToEnd(t, bins, newRedisE2E(t, bins))
	})
	t.Run("MySQL", func(t *testing.T) {
		t.Parallel()
		relayEndToEnd(t, bins, newMySQLE2E(t, bins))
	})
	t.Run("PgBouncer", func(t *testing.T) {
		t.Parallel()
		relayEndToEnd(t, bins, newPostgresE2E(t, bins, pgbouncerURL(t)))
	})
	t.Run("KafkaTLSAndSASL", func(t *testing.T) {
		t.Parallel()
		relayTLSAndSASL(t, bins)
	})
}

// relayTLSAndSASL: a relay publishes transactionally to a broker that
// requires TLS and SCRAM-SHA-512, creating the topic as it goes (the
// broker allows it), with a store URL and a Kafka password
// that appear in nothing it prints or serves; a relay with a wrong Kafka
// password says on /readyz and in its log that Kafka is not reachable, and
// still stops cleanly.
func relayTLSAndSASL(t *testing.T, bins relayBins) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // watchdog
	defer cancel()
	const user, pass, wrong = "relay", "Kafka-Secret-e2e-7Q", "Wrong-Secret-e2e-8W"
	pki := clitest.NewPKI(t)
	broker := startBroker(t, bins, []string{"KFAKE_SASL_PASSWORD=" + pass},
		"-auto-create", "-partitions", "2", "-sasl", "SCRAM-SHA-512", "-sasl-user", user,
		"-tls-cert", pki.CertFile, "-tls-key", pki.KeyFile)

	s := newPostgresE2E(t, bins, "")
	// A password in the store URL (a server that trusts local connections
	// ignores it).
	storeURL, err := url.Parse(s.settings[0][1])
	if err != nil {
		t.Fatal(err)
	}
	storePass, ok := storeURL.User.Password()
	if !ok {
		storePass = "Store-Secret-e2e-9E"
		storeURL.User = url.UserPassword(storeURL.User.Username(), storePass)
	}
	secrets := []string{pass, wrong, storePass}
	var committed []outbox.Entry
	for i := range 20 {
		committed = append(committed, outbox.Entry{ID: fmt.Sprintf("tls-%02d", i), Topic: "orders", Key: fmt.Sprintf("k%d", i%3), Payload: []byte("p")})
	}
	if err := s.appendTx(ctx, true, committed); err != nil {
		t.Fatal(err)
	}
	args := func(extra ...string) []string {
		return append([]string{"--store", storeURL.String(), "--schema", s.settings[1][1],
			"--kafka-brokers", broker, "--kafka-tls-ca", pki.CAFile,
			"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", user,
			"--poll-interval", "100ms", "--drain-timeout", relayE2EDrain.String(),
			"--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, extra...)
	}
	noSecrets := func(what, text string) {
		t.Helper()
		for _, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows the password %q:\n%s", what, secret, text)
			}
		}
	}

	relay := startRelay(t, bins, args("--kafka-transactional-id-prefix", "outbox-e2e-", "--kafka-auto-create-topics"), "OUTBOX_KAFKA_PASSWORD="+pass)
	cons := newE2EConsumer(t, broker, []kgo.Opt{
		kgo.DialTLSConfig(&tls.Config{RootCAs: pki.Pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	})
	cons.pollUntil(ctx, func() bool { return cons.has(committed) })
	code, body := httpGet(t, "http://"+relay.addr+"/readyz")
	if code != 200 || !strings.Contains(body, `"ready": true`) {
		t.Errorf("/readyz: %d %s", code, body)
	}
	noSecrets("/readyz", body)
	_, metrics := scrapeMetrics(t, relay.addr)
	noSecrets("/metrics", metrics)
	_, logs := stopRelay(t, relay)
	noSecrets("the relay's log", logs)
	if !strings.Contains(logs, `"kafka_sasl":"SCRAM-SHA-512"`) || !strings.Contains(logs, `"kafka_transactional":true`) || !strings.Contains(logs, `"kafka_tls":true`) {
		t.Errorf("the relay's start log does not show TLS, SASL and transactions on:\n%s", logs)
	}

	bad := startRelay(t, bins, args("--kafka-sasl-password", wrong))
	code, body = httpGet(t, "http://"+bad.addr+"/readyz")
	var rep relaycmd.ReadyReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("/readyz: %v: %s", err, body)
	}
	if code != http.StatusServiceUnavailable || rep.Ready || rep.Kafka.OK || rep.Kafka.Error == "" || !rep.Store.OK {
		t.Errorf("/readyz with a wrong Kafka password: %d %s", code, body)
	}
	noSecrets("/readyz", body)
	_, logs = stopRelay(t, bad)
	noSecrets("the relay's log", logs)
	if !strings.Contains(logs, `"msg":"outbox relay: Kafka is not reachable`) {
		t.Errorf("the relay with a wrong password did not log that Kafka is not reachable:\n%s", logs)
	}
	cons.pollToEnd(ctx, map[string]int32{"orders": 2})
	cons.check(t, committed, nil, map[string]string{"orders": "orders"})
	t.Logf("/readyz with a wrong Kafka password:\n%s", body)
}

// runOutbox runs the outbox command (migrate up, say) and fails t unless
// it exits 0.
func runOutbox(t *testing.T, bins relayBins, args ...string) string {
	t.Helper()
	cmd := exec.Command(bins.outbox, args...)
	cmd.Env = relayEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("outbox %s: %v\n%s", strings.Join(args[:2], " "), err, out)
	}
	return string(out)
}

// writeRelayConfig writes settings as a --config file: kafka-brokers as a
// YAML sequence, kafka-topic-map as a mapping, the others as strings.
func writeRelayConfig(t *testing.T, settings [][2]string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# outbox relay --config, written by relay_test.go\n")
	for _, kv := range settings {
		switch kv[0] {
		case "kafka-brokers":
			fmt.Fprintf(&b, "%s:\n", kv[0])
			for _, h := range strings.Split(kv[1], ",") {
				fmt.Fprintf(&b, "  - %q\n", h)
			}
		case "kafka-topic-map":
			fmt.Fprintf(&b, "%s:\n", kv[0])
			for _, m := range strings.Split(kv[1], ",") {
				from, to, _ := strings.Cut(m, "=")
				fmt.Fprintf(&b, "  %q: %q\n", from, to)
			}
		default:
			fmt.Fprintf(&b, "%s: %q\n", kv[0], kv[1])
		}
	}
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// relayBins are the built binaries.
type relayBins struct{ outbox, broker string }

// buildRelayBinaries builds the outbox command and the kfake broker into
// t's temporary directory, with -race when this test binary has it (the
// packages are then already compiled that way, and a race in the relay
// makes it exit 66).
func buildRelayBinaries(t *testing.T) relayBins {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir := t.TempDir()
	bins := relayBins{outbox: filepath.Join(dir, "outbox"), broker: filepath.Join(dir, "kfakebroker")}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, b := range []struct{ out, pkg string }{
		{bins.outbox, "github.com/outboxrelay/outbox/cmd/outbox"},
		{bins.broker, "github.com/outboxrelay/outbox/internal/cmd/kfakebroker"},
	} {
		wg.Go(func() {
			args := []string{"build", "-o", b.out}
			if relayRaceBuild {
				args = append(args, "-race")
			}
			out, err := exec.Command(goTool, append(args, b.pkg)...).CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return bins
}

// e2eStore is an outbox made for one end-to-end test, and how to append to
// it from the test.
type e2eStore struct {
	name string
	// settings name the outbox to `outbox relay`: store, and schema or
	// prefix, by flag name.
	settings [][2]string
	// config: give the relay its settings in a --config file, not flags.
	config bool
	// storePoll: no --poll-interval, so the relay polls at the store's
	// default, which its start log shows.
	storePoll string
	// store opens the outbox from the test, for appends and checks.
	store outbox.Store
	// appendTx appends entries in one transaction, committed or rolled back.
	appendTx func(ctx context.Context, commit bool, entries []outbox.Entry) error
}

// newPostgresE2E creates an outbox with 4 partitions in a fresh schema,
// directly. With a PgBouncer URL, the relay and the test's appends go
// through it, with pgx's simple protocol.
func newPostgresE2E(t *testing.T, bins relayBins, bouncer string) *e2eStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := relayPool(t, testenv.PostgresURL(), "OUTBOX_POSTGRES_URL", "PostgreSQL")
	schema := "relay_e2e_" + relayRandom()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := direct.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	runOutbox(t, bins, "migrate", "up", "--store", testenv.PostgresURL(), "--schema", schema, "--partitions", "4")
	storeURL, appendPool, name := testenv.PostgresURL(), direct, "postgres"
	if bouncer != "" {
		storeURL = withQuery(t, bouncer, "default_query_exec_mode", "simple_protocol")
		appendPool = relayPool(t, storeURL, "OUTBOX_PGBOUNCER_URL", "PgBouncer")
		name = "pgbouncer"
	}
	b, err := pgoutbox.New(ctx, appendPool, pgoutbox.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &e2eStore{
		name:     name,
		settings: [][2]string{{"store", storeURL}, {"schema", schema}},
		store:    b,
		appendTx: func(ctx context.Context, commit bool, entries []outbox.Entry) error {
			tx, err := appendPool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if err := b.AppendInTx(ctx, tx, entries...); err != nil {
				return err
			}
			if !commit {
				return tx.Rollback(ctx)
			}
			return tx.Commit(ctx)
		},
	}
}

// newRedisE2E creates an outbox with 4 partitions at a fresh prefix.
func newRedisE2E(t *testing.T, bins relayBins) *e2eStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := testenv.RedisURL()
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("OUTBOX_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	tag := "relay-e2e-" + relayRandom()
	prefix := "{" + tag + "}"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, "*"+tag+"*", 1000).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	runOutbox(t, bins, "migrate", "up", "--store", u, "--prefix", prefix, "--partitions", "4")
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &e2eStore{
		name:     "redis",
		settings: [][2]string{{"store", u}, {"prefix", prefix}},
		config:   true,
		store:    b,
		appendTx: func(ctx context.Context, commit bool, entries []outbox.Entry) error {
			tx := client.TxPipeline()
			if err := b.AppendInTx(ctx, tx, entries...); err != nil {
				return err
			}
			if !commit {
				tx.Discard()
				return nil
			}
			_, err := tx.Exec(ctx)
			return err
		},
	}
}

// relayEndToEnd: entries appended before and while the relay runs (and
// some rolled back) all reach Kafka, in per-key order; /metrics, /healthz
// and /readyz answer; SIGTERM drains, releases the leases and exits 0
// within the drain bound.
func relayEndToEnd(t *testing.T, bins relayBins, s *e2eStore) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // watchdog
	defer cancel()
	broker := startBroker(t, bins, nil, "-topics", "orders.v2,e2e.users", "-partitions", "3")

	// Entries: topic "orders" maps to Kafka topic "orders.v2", "users"
	// gets the prefix; keys k0..k6, and some without a key.
	var committed, rolledBack []outbox.Entry
	seq := 0
	batch := func(n int) []outbox.Entry {
		var out []outbox.Entry
		for range n {
			seq++
			e := outbox.Entry{ID: fmt.Sprintf("%s-%04d", s.name, seq), Topic: "orders", Key: fmt.Sprintf("k%d", seq%7),
				Payload: []byte(fmt.Sprintf(`{"n":%d}`, seq))}
			switch {
			case seq%5 == 0:
				e.Topic = "users"
			case seq%11 == 0:
				e.Key = ""
			}
			out = append(out, e)
		}
		return out
	}
	appendSome := func(txs int) {
		for i := range txs {
			entries := batch(10)
			commit := i != txs/2
			if err := s.appendTx(ctx, commit, entries); err != nil {
				t.Fatalf("append: %v", err)
			}
			if commit {
				committed = append(committed, entries...)
			} else {
				rolledBack = append(rolledBack, entries...)
			}
		}
	}
	appendSome(8) // before the relay starts

	settings := append(slices.Clone(s.settings),
		[2]string{"kafka-brokers", broker},
		[2]string{"kafka-topic-map", "orders=orders.v2"}, [2]string{"kafka-topic-prefix", "e2e."},
		[2]string{"batch", "50"}, [2]string{"stats-interval", "100ms"},
		[2]string{"drain-timeout", relayE2EDrain.String()},
		[2]string{"metrics-addr", "127.0.0.1:0"}, [2]string{"log-format", "json"}, [2]string{"log-level", "debug"})
	if s.storePoll == "" {
		settings = append(settings, [2]string{"poll-interval", "100ms"})
	}
	var args []string
	if s.config {
		args = []string{"--config", writeRelayConfig(t, settings)}
	} else {
		for _, kv := range settings {
			args = append(args, "--"+kv[0], kv[1])
		}
	}
	relay := startRelay(t, bins, args)
	appendSome(8) // while it runs

	cons := newE2EConsumer(t, broker, nil)
	cons.pollUntil(ctx, func() bool { return cons.has(committed) })
	delivered, firstPart := time.Since(began), len(committed)

	// The gauges come from a stats sample after the last publish. The sent
	// counter moves right after MarkSent returns, so a scrape can see the
	// store empty (another connection saw the commit) a moment before the
	// counter catches up: wait for both.
	var metrics map[string]float64
	var metricsBody string
	for {
		metrics, metricsBody = scrapeMetrics(t, relay.addr)
		if metrics["outbox_pending"] == 0 && metrics["outbox_due"] == 0 && metrics["outbox_relay_partitions_held"] == 4 &&
			metrics[`outbox_relay_entries_total{outcome="sent"}`] >= float64(len(committed)) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the metrics never showed an empty outbox held by the relay and every committed entry sent: %v", metrics)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for name, want := range map[string]float64{
		"outbox_pending": 0, "outbox_due": 0, "outbox_parked": 0, "outbox_lag_seconds": 0,
		"outbox_relay_partitions_held": 4, "outbox_relay_partitions_target": 4, "outbox_relay_members": 1,
		`outbox_relay_breaker_state{topic="orders"}`: 0, // one breaker per topic
	} {
		if got, ok := metrics[name]; !ok || got != want {
			t.Errorf("/metrics: %s = %v (present: %v), want %v", name, got, ok, want)
		}
	}

	if code, body := httpGet(t, "http://"+relay.addr+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, body := httpGet(t, "http://"+relay.addr+"/readyz")
	var rep relaycmd.ReadyReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("/readyz: %v: %s", err, body)
	}
	if code != 200 || !rep.Ready || rep.State != "active" || !rep.Store.OK || !rep.Kafka.OK ||
		rep.PartitionsHeld != 4 || rep.PartitionsTarget != 4 || rep.Partitions != 4 || rep.Members != 1 {
		t.Errorf("/readyz: %d %s", code, body)
	}

	// A burst, and SIGTERM right after it, while the relay is busy: it
	// drains, releases its leases and exits 0 within the bound.
	appendSome(30)
	drain, logs := stopRelay(t, relay)
	if s.storePoll != "" && !strings.Contains(logs, `"poll_interval":"`+s.storePoll+`"`) {
		t.Errorf("the relay without --poll-interval does not poll at the store's default %s:\n%s", s.storePoll, firstLines(logs, 6))
	}
	// Released: another owner gets every lease at once (the relay's
	// would otherwise last 30 s).
	for p := range 4 {
		l, err := s.store.AcquireLease(ctx, p, "e2e-check", 5*time.Second)
		if err != nil {
			t.Errorf("partition %d's lease after the relay exited: %v (not released?)", p, err)
			continue
		}
		_ = s.store.ReleaseLease(ctx, l)
	}

	// A second relay delivers what the first left.
	relay2 := startRelay(t, bins, args)
	cons.pollUntil(ctx, func() bool { return cons.has(committed) })
	stopRelay(t, relay2)

	// Everything in the broker now: every committed entry, in per-key
	// order of first deliveries, nothing rolled back.
	cons.pollToEnd(ctx, map[string]int32{"orders.v2": 3, "e2e.users": 3})
	cons.check(t, committed, rolledBack, map[string]string{"orders": "orders.v2", "users": "e2e.users"})
	t.Logf("%s: %d entries (%d rolled back); the first %d delivered %.2fs after the start; the first relay drained and exited %.3fs after SIGTERM; %.2fs in all",
		s.name, len(committed), len(rolledBack), firstPart, delivered.Seconds(), drain.Seconds(), time.Since(began).Seconds())
	t.Logf("%s: relay log (first lines):\n%s", s.name, firstLines(logs, 6))
	t.Logf("%s: /metrics gauges:\n%s", s.name, gaugeLines(metricsBody))
}

// stopRelay sends SIGTERM and waits for a clean exit (status 0, the drain
// logged, no error) within --drain-timeout plus 5 s; it returns how long
// that took and the relay's log.
func stopRelay(t *testing.T, relay *relayProc) (time.Duration, string) {
	t.Helper()
	stopped := time.Now()
	if err := relay.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-relay.exited:
	case <-time.After(relayE2EDrain + 5*time.Second):
		_ = relay.cmd.Process.Kill()
		<-relay.exited
		t.Fatalf("the relay did not exit within --drain-timeout %v + 5s of SIGTERM; its log:\n%s", relayE2EDrain, relay.logs())
	}
	took := time.Since(stopped)
	logs := relay.logs()
	if code := relay.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the relay exited %d after SIGTERM, want 0; its log:\n%s", code, logs)
	}
	for _, want := range []string{`"msg":"outbox relay: running`, `"msg":"outbox relay: draining`, `"msg":"outbox relay: drained and released its leases; exiting"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the relay's log has no %s; its log:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("the relay logged an error:\n%s", logs)
	}
	return took, logs
}

// relayProc is a running `outbox relay`.
type relayProc struct {
	cmd    *exec.Cmd
	addr   string // of the metrics server
	exited chan struct{}

	mu  sync.Mutex
	log strings.Builder
}

func (p *relayProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startRelay starts `outbox relay args...` (with --log-format json and a
// --metrics-addr) and waits until it logs that it runs. The process is killed (by its PID) when t
// ends, if it still runs.
func startRelay(t *testing.T, bins relayBins, args []string, env ...string) *relayProc {
	t.Helper()
	cmd := exec.Command(bins.outbox, append([]string{"relay"}, args...)...)
	cmd.Env = append(relayEnv(), env...)
	cmd.SysProcAttr = relayProcAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &relayProc{cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout = &lockedWriter{mu: &p.mu, w: &p.log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr, running := make(chan string, 1), make(chan struct{})
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			switch {
			case json.Unmarshal([]byte(line), &rec) != nil:
			case strings.HasPrefix(rec.Msg, "outbox relay: serving /metrics"):
				addr <- rec.Addr
			case strings.HasPrefix(rec.Msg, "outbox relay: running"):
				close(running)
			}
		}
	}()
	go func() {
		<-scanned
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case <-running:
		p.addr = <-addr
	case <-p.exited:
		t.Fatalf("outbox relay exited (%v) before it ran:\n%s", cmd.ProcessState, p.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("outbox relay did not run within 30s:\n%s", p.logs())
	}
	return p
}

// startBroker starts the kfake broker process with env added to its
// environment and returns its address.
// It ends when its standard input closes: at t's end, or with the test
// binary.
func startBroker(t *testing.T, bins relayBins, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bins.broker, append([]string{"-exit-on-stdin-eof"}, args...)...)
	cmd.Env = append(relayEnv(), env...)
	cmd.SysProcAttr = relayProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("kfakebroker printed no address: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(line)
}

// relayEnv is the test's environment without OUTBOX_* variables (the
// command reads OUTBOX_STORE and OUTBOX_KAFKA_*), with races fatal.
func relayEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_") && !strings.HasPrefix(kv, "GORACE=") && !strings.HasPrefix(kv, "KFAKE_") {
			env = append(env, kv)
		}
	}
	return append(env, "GORACE=halt_on_error=1 atexit_sleep_ms=0")
}

// e2eConsumer reads the end-to-end topics from the start.
type e2eConsumer struct {
	t    *testing.T
	cl   *kgo.Client
	recs []*kgo.Record // in consumption order: offset order per partition
	seen map[string]bool

	sentinelsFrom int // recs before it hold no sentinel pollToEnd waits for
}

func newE2EConsumer(t *testing.T, broker string, opts []kgo.Opt) *e2eConsumer {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(strings.Split(broker, ",")...),
		kgo.ConsumeRegex(), kgo.ConsumeTopics(".*"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(100 * time.Millisecond), kgo.MetadataMaxAge(200 * time.Millisecond), // finds auto-created topics
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), // pollToEnd's sentinels
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &e2eConsumer{t: t, cl: cl, seen: map[string]bool{}}
}

// pollUntil consumes until done reports true or ctx ends.
func (c *e2eConsumer) pollUntil(ctx context.Context, done func() bool) {
	c.t.Helper()
	for !done() {
		if ctx.Err() != nil {
			c.t.Fatalf("consumed %d records (%d distinct IDs); the condition never held", len(c.recs), len(c.seen))
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := c.cl.PollFetches(pctx)
		cancel()
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				c.t.Logf("fetch %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			c.recs = append(c.recs, r)
			c.seen[kafkasink.EntryID(r)] = true
		})
	}
}

func (c *e2eConsumer) has(entries []outbox.Entry) bool {
	for _, e := range entries {
		if !c.seen[e.ID] {
			return false
		}
	}
	return true
}

// pollToEnd consumes every record the topics' partitions hold now: it
// appends a sentinel record (no ID header) to each, and reads until it has
// seen them all. (End offsets would not do: with transactions, the last
// offset of a partition can be a commit marker no consumer sees.)
func (c *e2eConsumer) pollToEnd(ctx context.Context, topics map[string]int32) {
	c.t.Helper()
	var recs []*kgo.Record
	want := map[string]bool{}
	for topic, n := range topics {
		for p := range n {
			v := fmt.Sprintf("sentinel %s/%d", topic, p)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)})
			want[v] = true
		}
	}
	if err := c.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		c.t.Fatalf("producing the sentinels: %v", err)
	}
	c.pollUntil(ctx, func() bool {
		for _, r := range c.recs[c.sentinelsFrom:] {
			delete(want, string(r.Value))
		}
		c.sentinelsFrom = len(c.recs)
		return len(want) == 0
	})
}

// check: every committed entry arrived on its mapped topic, nothing
// rolled back did, and the first deliveries of each key came in append
// order.
func (c *e2eConsumer) check(t *testing.T, committed, rolledBack []outbox.Entry, topicOf map[string]string) {
	t.Helper()
	want := map[string]outbox.Entry{}
	wantOrder := map[string][]string{} // "kafkaTopic/key" -> IDs in append order
	for _, e := range committed {
		want[e.ID] = e
		if e.Key != "" {
			k := topicOf[e.Topic] + "/" + e.Key
			wantOrder[k] = append(wantOrder[k], e.ID)
		}
	}
	gotOrder := map[string][]string{}
	first := map[string]bool{}
	dups := 0
	for _, r := range c.recs {
		id := kafkasink.EntryID(r)
		if id == "" && strings.HasPrefix(string(r.Value), "sentinel ") {
			continue
		}
		e, ok := want[id]
		if !ok {
			t.Errorf("record %s/%d@%d has ID %q, which no committed entry has", r.Topic, r.Partition, r.Offset, id)
			continue
		}
		if r.Topic != topicOf[e.Topic] || string(r.Key) != e.Key || string(r.Value) != string(e.Payload) {
			t.Errorf("entry %s arrived as topic %q key %q value %q; want %q %q %q", id, r.Topic, r.Key, r.Value, topicOf[e.Topic], e.Key, e.Payload)
		}
		if first[id] {
			dups++
			continue
		}
		first[id] = true
		if e.Key != "" {
			k := r.Topic + "/" + e.Key
			gotOrder[k] = append(gotOrder[k], id)
		}
	}
	for _, e := range committed {
		if !first[e.ID] {
			t.Errorf("entry %s (topic %s, key %q) never arrived", e.ID, e.Topic, e.Key)
		}
	}
	for _, e := range rolledBack {
		if c.seen[e.ID] {
			t.Errorf("entry %s of a rolled-back transaction arrived", e.ID)
		}
	}
	for k, ids := range wantOrder {
		if !slices.Equal(gotOrder[k], ids) {
			t.Errorf("key %s: first deliveries %v, append order %v", k, gotOrder[k], ids)
		}
	}
	if dups > 0 {
		t.Logf("%d duplicate deliveries (at least once)", dups)
	}
}

// metricLine is one sample of the Prometheus text format.
var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// scrapeMetrics reads /metrics and returns its unlabelled samples by name,
// outbox_relay_entries_total summed by outcome (as
// outbox_relay_entries_total{outcome="sent"}), and the body.
func scrapeMetrics(t *testing.T, addr string) (map[string]float64, string) {
	t.Helper()
	code, body := httpGet(t, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		m := metricLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		name := m[1]
		if name == "outbox_relay_entries_total" {
			if o := regexp.MustCompile(`outcome="([^"]*)"`).FindStringSubmatch(m[2]); o != nil {
				out[name+`{outcome="`+o[1]+`"}`] += v
			}
			continue
		}
		if name == "outbox_relay_breaker_state" {
			if o := regexp.MustCompile(`topic="([^"]*)"`).FindStringSubmatch(m[2]); o != nil {
				out[name+`{topic="`+o[1]+`"}`] = v
			}
			continue
		}
		if m[2] == "" {
			out[name] = v
		}
	}
	return out, body
}

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp.StatusCode, string(b)
}

// relayPool connects to url, or skips (fails under
// OUTBOX_REQUIRE_SERVICES=1) when nothing answers there.
func relayPool(t *testing.T, u, variable, service string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("%s: %v", variable, err)
	}
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		if p != nil {
			p.Close()
		}
		testenv.Unavailable(t, service, variable, err)
	}
	t.Cleanup(p.Close)
	return p
}

// pgbouncerURL returns OUTBOX_PGBOUNCER_URL, or skips (fails under
// OUTBOX_REQUIRE_SERVICES=1) when it is unset.
func pgbouncerURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("OUTBOX_PGBOUNCER_URL")
	if u == "" {
		msg := "OUTBOX_PGBOUNCER_URL is not set: ./scripts/test.sh sets it when pgbouncer is installed (apt-get install pgbouncer, or ./scripts/services.sh install); or run ./scripts/pgbouncer.sh start and export OUTBOX_PGBOUNCER_URL=$(./scripts/pgbouncer.sh url)"
		if testenv.Required() {
			t.Fatal(msg + " [OUTBOX_REQUIRE_SERVICES=1, so this is a failure]")
		}
		t.Skip(msg)
	}
	return u
}

// withQuery sets a query parameter of a URL.
func withQuery(t *testing.T, u, key, value string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := p.Query()
	q.Set(key, value)
	p.RawQuery = q.Encode()
	return p.String()
}

func relayRandom() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func firstLines(s string, n int) string {
	lines := strings.SplitAfterN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "")
}

// gaugeLines are the outbox gauge samples of a /metrics body.
func gaugeLines(body string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		for _, name := range []string{"outbox_pending", "outbox_due", "outbox_parked", "outbox_lag_seconds", "outbox_relay_partitions_held", "outbox_relay_partitions_target", "outbox_relay_members"} {
			if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}

// lockedWriter serialises writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
