package admincmd

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
)

// healthStore is a memory backend that reports a health reading and an
// archive as a store with them does (the SPI's optional interfaces, which
// status only reads and prints).
type healthStore struct {
	*memory.Backend
	health    outbox.Health
	oldest    time.Time
	healthErr error
}

func (s *healthStore) Health(context.Context) (outbox.Health, error) { return s.health, s.healthErr }
func (s *healthStore) MaintainArchive(context.Context, time.Time) error {
	return nil
}
func (s *healthStore) PurgeArchiveBatch(context.Context, time.Time, int) (int64, bool, error) {
	return 0, false, nil
}
func (s *healthStore) OldestArchived(context.Context) (time.Time, bool, error) {
	return s.oldest, !s.oldest.IsZero(), nil
}

// TestStatusPrintsHealth: status prints each warning on a WARNING line
// before the counts, the tables' figures ("?" for one the store cannot
// tell, "never" for no vacuum), the memory, the archive's oldest entry,
// and a health reading that failed without failing; -o json carries the
// same.
func TestStatusPrintsHealth(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 5, 12, 0, 0, 0, time.UTC)
	vacuumed := now.Add(-time.Hour)
	store := &healthStore{Backend: memory.New(memory.Options{Partitions: 1}), oldest: now.Add(-84 * time.Hour), health: outbox.Health{
		Tables: []outbox.TableHealth{
			{Name: `"s"."outbox"`, Bytes: 11 << 20, LiveRows: 850, DeadRows: 586000, Vacuums: 0},
			{Name: `"s"."outbox_archive"`, Bytes: 512, LiveRows: -1, DeadRows: 3, Vacuums: 2, LastVacuum: vacuumed},
		},
		Memory: &outbox.MemoryHealth{UsedBytes: 3 << 30, RSSBytes: 5 << 30, Fragmentation: 1.666},
		Warnings: []outbox.HealthWarning{
			{Code: "autovacuum-off", Message: "autovacuum is off for the server: run ALTER SYSTEM SET autovacuum = on."},
			{Code: "table-autovacuum-disabled", Object: `"s"."outbox"`, Message: "586000 dead rows: ALTER TABLE \"s\".\"outbox\" RESET (autovacuum_enabled)."},
		},
	}}
	o := &cli.Opened{Store: store, Kind: "postgres", Outbox: `"s"."outbox"`, Where: "postgres://db/app"}
	rep := StatusJSON{Partitions: 1}
	if err := partitionCounts(ctx, o, &rep, now); err != nil {
		t.Fatal(err)
	}
	storeHealth(ctx, o, &rep, now)
	var out bytes.Buffer
	if err := printStatus(&out, o, rep, now); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("status:\n%s", text)
	lines := strings.Split(text, "\n")
	if len(lines) < 3 || lines[1] != "WARNING (autovacuum-off): autovacuum is off for the server: run ALTER SYSTEM SET autovacuum = on." ||
		lines[2] != `WARNING (table-autovacuum-disabled on "s"."outbox"): 586000 dead rows: ALTER TABLE "s"."outbox" RESET (autovacuum_enabled).` {
		t.Errorf("the warnings are not the lines after the header:\n%s", text)
	}
	for _, re := range []string{
		`(?m)^TABLE\s+SIZE\s+LIVE ROWS\s+DEAD ROWS\s+VACUUMS\s+LAST VACUUM$`,
		`(?m)^"s"\."outbox"\s+11\.0 MiB\s+850\s+586000\s+0\s+never$`,
		`(?m)^"s"\."outbox_archive"\s+512 B\s+\?\s+3\s+2\s+2026-03-05T11:00:00Z$`,
		`(?m)^memory: 3\.0 GiB used, 5\.0 GiB resident, fragmentation 1\.67$`,
		`(?m)^archive: oldest entry sent 2026-03-02T00:00:00Z \(3\.5 days ago\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("status does not match %s", re)
		}
	}
	if rep.Health == nil || len(rep.Health.Warnings) != 2 || rep.Health.Tables[1].LastVacuum == nil || rep.Health.Tables[0].LastVacuum != nil ||
		rep.Archive == nil || rep.Archive.Empty || *rep.Archive.OldestAgeSeconds != 84*3600 || rep.HealthError != nil {
		t.Errorf("-o json: %+v %+v %v", rep.Health, rep.Archive, rep.HealthError)
	}

}

// TestStatusHealthReadingFails: a failed health reading does not fail
// status; it says why, and the archive is still shown.
func TestStatusHealthReadingFails(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 5, 12, 0, 0, 0, time.UTC)
	store := &healthStore{Backend: memory.New(memory.Options{Partitions: 1}), oldest: now.Add(-time.Hour),
		healthErr: errors.New("permission denied for view pg_stat_activity")}
	o := &cli.Opened{Store: store, Kind: "postgres", Outbox: `"s"."outbox"`, Where: "postgres://db/app"}
	rep := StatusJSON{Partitions: 1}
	storeHealth(ctx, o, &rep, now)
	var out bytes.Buffer
	if err := printStatus(&out, o, rep, now); err != nil {
		t.Fatal(err)
	}
	if rep.Health != nil || rep.Archive == nil || rep.HealthError == nil ||
		!strings.Contains(out.String(), "(the store's health could not be read: permission denied for view pg_stat_activity)") ||
		!strings.Contains(out.String(), "archive: oldest entry sent") {
		t.Errorf("a failed health reading: %+v %v\n%s", rep.Health, rep.HealthError, out.String())
	}

}

// TestStatusWithoutHealth: a store that reports neither health nor an
// archive prints neither, and -o json has them null.
func TestStatusWithoutHealth(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 5, 12, 0, 0, 0, time.UTC)
	bare := &cli.Opened{Store: memory.New(memory.Options{Partitions: 1}), Kind: "memory", Outbox: "m"}
	rep := StatusJSON{Partitions: 1}
	storeHealth(ctx, bare, &rep, now)
	var out bytes.Buffer
	if err := printStatus(&out, bare, rep, now); err != nil {
		t.Fatal(err)
	}
	if rep.Health != nil || rep.Archive != nil || rep.HealthError != nil || strings.Contains(out.String(), "WARNING") || strings.Contains(out.String(), "archive:") {
		t.Errorf("a store with neither interface: %+v %+v\n%s", rep.Health, rep.Archive, out.String())
	}
}

func TestByteSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 11 << 20: "11.0 MiB", 3 << 30: "3.0 GiB", 2 << 40: "2.0 TiB", 5000 << 40: "5000.0 TiB"} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
}
