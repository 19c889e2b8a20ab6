package ops_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/internal/ops"
)

// keeper is a memory backend that also reports an archive and a health
// reading, or fails them, as a store with an archive does: it stands for
// the SPI's optional interfaces, which ReadHealth only calls and reports.
type keeper struct {
	*memory.Backend
	oldest                time.Time // zero: an empty archive
	health                outbox.Health
	archiveErr, healthErr error
}

func (k *keeper) MaintainArchive(context.Context, time.Time) error { return nil }

func (k *keeper) PurgeArchiveBatch(context.Context, time.Time, int) (int64, bool, error) {
	return 0, false, nil
}

func (k *keeper) OldestArchived(context.Context) (time.Time, bool, error) {
	return k.oldest, !k.oldest.IsZero(), k.archiveErr
}

func (k *keeper) Health(context.Context) (outbox.Health, error) { return k.health, k.healthErr }

var (
	_ outbox.ArchiveJanitor = (*keeper)(nil)
	_ outbox.HealthChecker  = (*keeper)(nil)
)

func TestReadHealth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	health := outbox.Health{
		Tables:   []outbox.TableHealth{{Name: `"public"."outbox"`, Bytes: 8192, LiveRows: 3, DeadRows: 900, Vacuums: 0}},
		Warnings: []outbox.HealthWarning{{Code: "autovacuum-off", Message: "autovacuum is off"}},
	}
	t.Run("NeitherInterface", func(t *testing.T) {
		t.Parallel()
		sh, err := ops.ReadHealth(ctx, memory.New(memory.Options{}), now)
		if err != nil || sh.Health != nil || sh.Archive != nil {
			t.Fatalf("ReadHealth of a store with neither interface: %+v, %v; want nothing", sh, err)
		}
	})
	t.Run("OldestArchivedAndHealth", func(t *testing.T) {
		t.Parallel()
		k := &keeper{Backend: memory.New(memory.Options{}), oldest: now.Add(-50 * time.Hour), health: health}
		sh, err := ops.ReadHealth(ctx, k, now)
		if err != nil {
			t.Fatal(err)
		}
		if sh.Archive == nil || sh.Archive.Empty || !sh.Archive.OldestSent.Equal(k.oldest) || sh.Archive.OldestAge != 50*time.Hour {
			t.Errorf("Archive = %+v; want the oldest sent 50h ago", sh.Archive)
		}
		if sh.Health == nil || len(sh.Health.Tables) != 1 || sh.Health.Tables[0].DeadRows != 900 || len(sh.Health.Warnings) != 1 {
			t.Errorf("Health = %+v; want the store's reading", sh.Health)
		}
	})
	t.Run("EmptyArchive", func(t *testing.T) {
		t.Parallel()
		sh, err := ops.ReadHealth(ctx, &keeper{Backend: memory.New(memory.Options{})}, now)
		if err != nil || sh.Archive == nil || !sh.Archive.Empty || !sh.Archive.OldestSent.IsZero() || sh.Archive.OldestAge != 0 {
			t.Fatalf("ReadHealth of an empty archive: %+v, %v", sh.Archive, err)
		}
	})
	t.Run("ClockAhead", func(t *testing.T) {
		t.Parallel()
		sh, err := ops.ReadHealth(ctx, &keeper{Backend: memory.New(memory.Options{}), oldest: now.Add(time.Minute)}, now)
		if err != nil || sh.Archive == nil || sh.Archive.OldestAge != 0 {
			t.Fatalf("an oldest entry sent after now: %+v, %v; want age 0", sh.Archive, err)
		}
	})
}

// TestReadHealthOneReadingFails: a failed reading is returned as the store
// gave it, with what the other reading found.
func TestReadHealthOneReadingFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	health := outbox.Health{Tables: []outbox.TableHealth{{Name: "outbox"}}}
	boom := errors.New("permission denied for pg_stat_user_tables")
	sh, err := ops.ReadHealth(ctx, &keeper{Backend: memory.New(memory.Options{}), oldest: now.Add(-time.Hour), healthErr: boom}, now)
	if !errors.Is(err, boom) || sh.Health != nil || sh.Archive == nil || sh.Archive.OldestAge != time.Hour {
		t.Fatalf("a failed health reading: %+v, %v; want the error and the archive read", sh, err)
	}
	sh, err = ops.ReadHealth(ctx, &keeper{Backend: memory.New(memory.Options{}), archiveErr: boom, health: health}, now)
	if !errors.Is(err, boom) || sh.Archive != nil || sh.Health == nil {
		t.Fatalf("a failed archive reading: %+v, %v; want the error and the health read", sh, err)
	}
}

// TestReadHealthPostgres reads a real Postgres outbox once its backend
// reports its health and archive (the postgres backend's HealthChecker
// and ArchiveJanitor): its outbox table is among the tables, and its
// empty archive reads as empty.
func TestReadHealthPostgres(t *testing.T) {
	t.Parallel()
	s := openPostgres(t)
	_, hc := s.(outbox.HealthChecker)
	_, aj := s.(outbox.ArchiveJanitor)
	if !hc || !aj {
		t.Skipf("pgoutbox does not implement outbox.HealthChecker (%v) and outbox.ArchiveJanitor (%v) in this build", hc, aj)
	}
	sh, err := ops.ReadHealth(context.Background(), s, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if sh.Archive == nil || !sh.Archive.Empty {
		t.Errorf("Archive = %+v; want an empty archive", sh.Archive)
	}
	found := false
	for _, tb := range sh.Health.Tables {
		found = found || strings.HasSuffix(strings.ReplaceAll(tb.Name, `"`, ""), ".outbox") && tb.Bytes > 0
	}
	if !found {
		t.Errorf("Health.Tables = %+v; want the outbox table with its size", sh.Health.Tables)
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"7d", 7 * 24 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{"0d", 0},
		{"0", 0},
		{"36h", 36 * time.Hour},
		{"1h30m", 90 * time.Minute},
	} {
		if got, err := ops.ParseDuration(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "-1d", "-5m", "7x", "d", "seven days", "1d12h", "NaNd", "Infd", "200000d"} {
		_, err := ops.ParseDuration(bad)
		if err == nil || !strings.Contains(err.Error(), "7d") || !strings.Contains(err.Error(), "90m") {
			t.Errorf("ParseDuration(%q): %v; want a refusal that shows the forms", bad, err)
		}
	}
}
