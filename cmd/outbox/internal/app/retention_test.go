package app

// Issue 32 in the CLI: `outbox relay --archive --archive-retention`,
// --parked-retention and the other retention flags (parsed, refused with
// the flag named, passed to the backend and the relay), and `outbox
// status` printing the store's health, its warnings and the archive's
// oldest entry.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outbox"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"
)

// TestRelayRetentionFlagsRefused: bad retention flags are usage errors
// (exit 2) that name the flag and what to write instead; the relay stops
// before it connects to anything.
func TestRelayRetentionFlagsRefused(t *testing.T) {
	t.Parallel()
	base := []string{"relay", "--kafka-brokers", "127.0.0.1:1"}
	pg := append(slices.Clone(base), "--store", "postgres://u@127.0.0.1:1/db")
	rd := append(slices.Clone(base), "--store", "redis://127.0.0.1:1")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"BadDuration", append(slices.Clone(pg), "--archive", "--archive-retention", "7x"), []string{"--archive-retention", `"7x" is not a duration`, "7d", "36h"}},
		{"NegativeDays", append(slices.Clone(pg), "--parked-retention=-1d"), []string{"--parked-retention", `"-1d" is not a duration`, "not negative"}},
		{"RetentionWithoutArchive", append(slices.Clone(pg), "--archive-retention", "7d"), []string{"--archive-retention 7d needs --archive", "add --archive", "outbox purge --before 7d"}},
		{"RedisArchive", append(slices.Clone(rd), "--archive"), []string{"--archive: a Redis outbox has no archive", "deletes each entry when it is sent", "--parked-retention works on it"}},
		{"RedisArchiveRetention", append(slices.Clone(rd), "--archive", "--archive-retention", "1.5d"), []string{"--archive-retention: a Redis outbox has no archive"}},
		{"ZeroInterval", append(slices.Clone(pg), "--retention-interval", "0s"), []string{"--retention-interval must be positive (it is 0s)"}},
		{"ZeroBatch", append(slices.Clone(pg), "--retention-batch", "0"), []string{"--retention-batch must be positive (it is 0)"}},
		{"ZeroPause", append(slices.Clone(pg), "--retention-pause", "0s"), []string{"--retention-pause must be positive"}},
		{"ZeroHealthInterval", append(slices.Clone(pg), "--health-interval", "0s"), []string{"--health-interval must not be 0", "a negative one to turn the health checks off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cliFails(t, 2, tc.want, tc.args...)
			if strings.Contains(r.stderr, "RelayOptions") || strings.Contains(r.stderr, "ArchiveRetention") {
				t.Errorf("the error names a Go option instead of the flag:\n%s", r.stderr)
			}
		})
	}
	t.Run("ConfigFile", func(t *testing.T) {
		t.Parallel()
		cfg := filepath.Join(t.TempDir(), "outbox.yaml")
		if err := os.WriteFile(cfg, []byte("archive: true\narchive-retention: 7 days\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cliFails(t, 2, []string{"archive-retention", `"7 days" is not a duration`, "7d"}, append(slices.Clone(pg), "--config", cfg)...)
	})
	t.Run("Help", func(t *testing.T) {
		t.Parallel()
		help := strings.Join(strings.Fields(cliOK(t, "relay", "--help")), " ")
		for _, want := range []string{"--archive-retention=DURATION", "DELETES PARKED ENTRIES FOR GOOD", "Needs --archive",
			"Default: " + outbox.DefaultRetentionInterval.String(), "Default: " + outbox.DefaultHealthInterval.String(),
			fmt.Sprintf("Default: %d", outbox.DefaultRetentionBatch), "Default: " + outbox.DefaultRetentionPause.String()} {
			if !strings.Contains(help, want) {
				t.Errorf("relay --help lacks %q", want)
			}
		}
	})
}

// archiveIDs lists the IDs in the Postgres archive of schema, in order.
func archiveIDs(t *testing.T, ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string) []string {
	t.Helper()
	rows, err := q.Query(ctx, "SELECT id FROM "+pgx.Identifier{schema, "outbox_archive"}.Sanitize()+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestRelayArchiveRetentionPostgres: `outbox relay --archive
// --archive-retention 1d` keeps the entries it sends in the archive, and
// removes those sent more than a day ago (backdated here) while keeping
// the others. The removal needs the postgres backend's ArchiveJanitor and
// the relay's retention rounds; the test says so and stops after the
// archive check in a build without the former.
func TestRelayArchiveRetentionPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	b, pool, flags := papercutOutbox(t)
	schema := flags[3]
	var entries []outbox.Entry
	for i := range 6 {
		entries = append(entries, outbox.Entry{ID: fmt.Sprintf("a%d", i), Topic: "orders", Key: fmt.Sprintf("k%d", i%2), Payload: []byte("p")})
	}
	appendPg(t, b, pool, entries...)

	run := startCLI(t, append([]string{"relay", "--kafka-brokers", strings.Join(cluster.ListenAddrs(), ","),
		"--archive", "--archive-retention", "1d", "--retention-interval", "200ms", "--retention-batch", "2",
		"--poll-interval", "100ms", "--log-format", "json"}, flags...)...)
	run.waitFor(t, regexp.MustCompile(`(outbox relay: running)`))
	logs := run.errs.String()
	if !strings.Contains(logs, `"archive_retention":"1d"`) || !strings.Contains(logs, "removed once older than --archive-retention") {
		t.Errorf("the relay's log does not say what it removes:\n%s", logs)
	}

	want := []string{"a0", "a1", "a2", "a3", "a4", "a5"}
	var got []string
	for deadline := time.Now().Add(60 * time.Second); !slices.Equal(got, want); time.Sleep(50 * time.Millisecond) { // watchdog
		if got = archiveIDs(t, ctx, pool, schema); time.Now().After(deadline) {
			t.Fatalf("the archive holds %v, want %v\n%s", got, want, run.errs)
		}
	}

	if _, ok := any(b).(outbox.ArchiveJanitor); !ok {
		t.Skip("pgoutbox does not implement outbox.ArchiveJanitor in this build: the removal of old archived entries is not checked")
	}
	if _, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "outbox_archive"}.Sanitize()+
		" SET sent_at = now() - interval '2 days' WHERE id IN ('a0', 'a2', 'a4')"); err != nil {
		t.Fatal(err)
	}
	want = []string{"a1", "a3", "a5"}
	for deadline := time.Now().Add(60 * time.Second); !slices.Equal(got, want); time.Sleep(50 * time.Millisecond) { // watchdog
		if got = archiveIDs(t, ctx, pool, schema); time.Now().After(deadline) {
			t.Fatalf("the archive holds %v, want %v (the entries sent 2 days ago removed)\n%s", got, want, run.errs)
		}
	}
	if code := run.finish(t); code != 0 {
		t.Fatalf("relay exited %d\n%s", code, run.errs)
	}
}

// TestRelayArchiveWithoutRetentionWarns: --archive alone archives and
// warns at start that the archive grows until it is purged.
func TestRelayArchiveWithoutRetentionWarns(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	_, _, flags := papercutOutbox(t)
	run := startCLI(t, append([]string{"relay", "--kafka-brokers", strings.Join(cluster.ListenAddrs(), ","), "--archive", "--log-format", "json"}, flags...)...)
	run.waitFor(t, regexp.MustCompile(`("level":"WARN","msg":"outbox relay: --archive keeps every sent entry in the archive until it is removed by hand)`))
	if !strings.Contains(run.errs.String(), "--archive-retention (such as 7d)") {
		t.Errorf("the warning does not name --archive-retention:\n%s", run.errs)
	}
	if code := run.finish(t); code != 0 {
		t.Fatalf("relay exited %d\n%s", code, run.errs)
	}
}

// TestRelayParkedRetentionRedis: --parked-retention is accepted for a
// Redis outbox (which has no archive); with the Redis backend's
// ParkedPurger, an entry parked (for a topic the broker does not have)
// more than the retention ago is removed by the relay, and the relay says
// at WARN what it removes.
func TestRelayParkedRetentionRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	url, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Append(ctx, outbox.Entry{ID: "lost", Topic: "missing", Key: "k", Payload: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	_, purges := any(b).(outbox.ParkedPurger)
	retention := "1h" // the entry parks and stays: only the flag's acceptance is checked
	if purges {
		retention = "1s"
	}
	run := startCLI(t, "relay", "--store", url, "--prefix", prefix, "--kafka-brokers", strings.Join(cluster.ListenAddrs(), ","),
		"--kafka-publish-timeout", "1s", "--kafka-unknown-topic-timeout", "1s", "--poll-interval", "100ms",
		"--parked-retention", retention, "--retention-interval", "200ms", "--log-format", "json")
	run.waitFor(t, regexp.MustCompile(`(outbox relay: running)`))
	var parked []outbox.Entry
	for deadline := time.Now().Add(60 * time.Second); len(parked) == 0; time.Sleep(50 * time.Millisecond) { // watchdog
		if parked, err = b.Parked(ctx, "", 10); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the entry of the missing topic did not park:\n%s", run.errs)
		}
	}
	if !purges {
		t.Skip("redisoutbox does not implement outbox.ParkedPurger in this build: --parked-retention is accepted, the removal is not checked")
	}
	for deadline := time.Now().Add(60 * time.Second); len(parked) > 0; time.Sleep(50 * time.Millisecond) { // watchdog
		if parked, err = b.Parked(ctx, "", 10); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parked entry was not removed after --parked-retention 1s:\n%s", run.errs)
		}
	}
	if logs := run.errs.String(); !strings.Contains(logs, `"level":"WARN"`) || !strings.Contains(logs, "lost") {
		t.Errorf("the relay did not log the removal of the parked entry at WARN with its ID:\n%s", logs)
	}
	if code := run.finish(t); code != 0 {
		t.Fatalf("relay exited %d\n%s", code, run.errs)
	}
}

// TestStatusHealthPostgres: `outbox status` on a Postgres outbox whose
// table has autovacuum disabled prints a WARNING line naming the table
// and the fix, the tables' figures and the archive's oldest entry, and
// -o json carries them. It needs the postgres backend's HealthChecker and
// ArchiveJanitor; without them status reports neither (null in JSON, no
// WARNING line), which is checked instead.
func TestStatusHealthPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, pool, flags := papercutOutbox(t)
	schema := flags[3]
	table := pgx.Identifier{schema, "outbox"}.Sanitize()
	if _, err := pool.Exec(ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	_, hc := any(b).(outbox.HealthChecker)
	_, aj := any(b).(outbox.ArchiveJanitor)

	text := cliOK(t, append([]string{"status"}, flags...)...)
	var rep admincmd.StatusJSON
	if err := json.Unmarshal([]byte(cliOK(t, append([]string{"status", "-o", "json"}, flags...)...)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.HealthError != nil {
		t.Errorf("health_error: %s", *rep.HealthError)
	}
	t.Logf("status:\n%s", text)
	if !hc {
		if rep.Health != nil || strings.Contains(text, "WARNING") {
			t.Errorf("a backend without HealthChecker: health %+v, text:\n%s", rep.Health, text)
		}
	} else {
		var w *admincmd.WarningJSON
		for i := range rep.Health.Warnings {
			if rep.Health.Warnings[i].Code == "table-autovacuum-disabled" {
				w = &rep.Health.Warnings[i]
			}
		}
		if w == nil || !strings.Contains(w.Object, "outbox") || !strings.Contains(w.Message, "autovacuum_enabled") {
			t.Errorf("-o json: no table-autovacuum-disabled warning on the outbox table naming the fix: %+v", rep.Health.Warnings)
		}
		if !regexp.MustCompile(`(?m)^WARNING \(table-autovacuum-disabled on [^)]*outbox[^)]*\): .*autovacuum_enabled`).MatchString(text) {
			t.Errorf("status prints no WARNING line for the table's disabled autovacuum:\n%s", text)
		}
		// The backend names the table schema-qualified, quoted or not.
		isOutbox := func(name string) bool { return strings.ReplaceAll(name, `"`, "") == schema+".outbox" }
		i := slices.IndexFunc(rep.Health.Tables, func(tj admincmd.TableJSON) bool { return isOutbox(tj.Name) })
		if i < 0 || rep.Health.Tables[i].Bytes <= 0 {
			t.Fatalf("-o json: health.tables lacks %s with its size: %+v", table, rep.Health.Tables)
		}
		name := regexp.QuoteMeta(rep.Health.Tables[i].Name)
		if !regexp.MustCompile(`(?m)^TABLE\s+SIZE\s+LIVE ROWS\s+DEAD ROWS\s+VACUUMS\s+LAST VACUUM$`).MatchString(text) ||
			!regexp.MustCompile(`(?m)^`+name+`\s+\d+\.\d [KMG]iB\s+\d+\s+\d+\s+\d+\s+\S+$`).MatchString(text) {
			t.Errorf("status prints no table figures for %s:\n%s", name, text)
		}
	}
	if !aj {
		if rep.Archive != nil || strings.Contains(text, "archive:") {
			t.Errorf("a backend without ArchiveJanitor: archive %+v, text:\n%s", rep.Archive, text)
		}
		return
	}
	if rep.Archive == nil || !rep.Archive.Empty || rep.Archive.OldestSent != nil || !strings.Contains(text, "archive: empty") {
		t.Errorf("an empty archive: %+v, text:\n%s", rep.Archive, text)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "outbox_archive"}.Sanitize()+
		" (seq, id, partition, topic, key, payload, attempts, last_error, created_at, sent_at) VALUES (1, 'old', 0, 't', 'k', '', 1, '', now() - interval '3 days', now() - interval '3 days')"); err != nil {
		t.Fatal(err)
	}
	text = cliOK(t, append([]string{"status"}, flags...)...)
	if err := json.Unmarshal([]byte(cliOK(t, append([]string{"status", "-o", "json"}, flags...)...)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Archive == nil || rep.Archive.Empty || rep.Archive.OldestAgeSeconds == nil || *rep.Archive.OldestAgeSeconds < 3*86400-60 {
		t.Errorf("an archive whose oldest entry was sent 3 days ago: %+v", rep.Archive)
	}
	if !regexp.MustCompile(`archive: oldest entry sent \S+ \(3\.0 days ago\)`).MatchString(text) {
		t.Errorf("status does not give the archive's oldest entry:\n%s", text)
	}
}

// TestStatusHealthRedis: `outbox status` on a Redis outbox prints the
// server's memory once the Redis backend reports its health, and never a
// table or an archive.
func TestStatusHealthRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	flags := []string{"--store", url, "--prefix", prefix}
	text := cliOK(t, append([]string{"status"}, flags...)...)
	var rep admincmd.StatusJSON
	if err := json.Unmarshal([]byte(cliOK(t, append([]string{"status", "-o", "json"}, flags...)...)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Archive != nil || strings.Contains(text, "archive:") || strings.Contains(text, "DEAD ROWS") {
		t.Errorf("a Redis outbox shows an archive or tables: %+v\n%s", rep.Archive, text)
	}
	if _, ok := any(b).(outbox.HealthChecker); !ok {
		if rep.Health != nil {
			t.Errorf("a backend without HealthChecker: health %+v", rep.Health)
		}
		return
	}
	if rep.Health == nil || rep.Health.Memory == nil || rep.Health.Memory.UsedBytes <= 0 || len(rep.Health.Tables) != 0 {
		t.Errorf("-o json health of a Redis outbox: %+v", rep.Health)
	}
	if !regexp.MustCompile(`(?m)^memory: [\d.]+ [KMGT]?i?B used, [\d.]+ [KMGT]?i?B resident, fragmentation \d+\.\d\d$`).MatchString(text) {
		t.Errorf("status prints no memory line:\n%s", text)
	}
}
