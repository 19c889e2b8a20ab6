package mysqlinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
)

// backdate moves the records of ids and the numbers of keys in the
// default inbox of db back by d, as if written d earlier (the shape of
// inboxtest.Harness.Backdate).
func backdate(t testing.TB, db *sql.DB, d time.Duration, ids, keys []string) {
	t.Helper()
	us := d.Microseconds()
	for _, id := range ids {
		if _, err := db.Exec("UPDATE `inbox` SET applied_at = applied_at - INTERVAL ? MICROSECOND WHERE id = ?", us, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		if _, err := db.Exec("UPDATE `inbox_keyseq` SET updated_at = updated_at - INTERVAL ? MICROSECOND WHERE k = ?", us, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// TestPurgeOldestFirstInBatches: Purge removes at most limit IDs and
// limit keys per call, the oldest first, only those before the horizon,
// and never the offsets; the janitor's rounds empty what is old.
func TestPurgeOldestFirstInBatches(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	ctx := t.Context()
	oldest, old, fresh := names("a", 10), names("b", 10), names("c", 5)
	all := slices.Concat(oldest, old, fresh)
	seqs := map[string]int64{}
	for _, k := range all {
		seqs[k] = 1
	}
	inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := s.Record(ctx, tx, all); err != nil {
			return err
		}
		if err := s.SetKeySeqs(ctx, tx, seqs); err != nil {
			return err
		}
		return s.SaveOffsets(ctx, tx, []inbox.Offset{{Group: "g", Topic: "t", Partition: 0, Next: 1}})
	})
	backdate(t, db, 3*time.Hour, oldest, oldest)
	backdate(t, db, 2*time.Hour, old, old)
	horizon := time.Now().Add(-time.Hour)

	ids, keys, err := s.Purge(ctx, horizon, 7)
	if err != nil || ids != 7 || keys != 7 {
		t.Fatalf("Purge(limit 7) = %d, %d, %v; want 7, 7", ids, keys, err)
	}
	if got := recordIDs(t, s, oldest...); slices.Contains(got[:7], false) {
		t.Fatalf("after the first batch, the oldest IDs %v: want the 7 oldest removed (new again) first", got)
	}
	ids, keys, err = inbox.PurgeOnce(ctx, s, inbox.JanitorOptions{Retention: time.Hour, BatchSize: 4, Pause: time.Millisecond})
	// The 7 IDs recorded again just now are new; 13 IDs and 13 keys are
	// left of the old ones.
	if err != nil || ids != 13 || keys != 13 {
		t.Fatalf("PurgeOnce = %d, %d, %v; want 13, 13", ids, keys, err)
	}
	var left int
	if err := db.QueryRow("SELECT (SELECT count(*) FROM `inbox`) + (SELECT count(*) FROM `inbox_keyseq`)").Scan(&left); err != nil || left != 7+5+5 {
		t.Fatalf("records left: %d, %v; want the 7 re-recorded and 5 fresh IDs, 5 fresh keys", left, err)
	}
	if got, err := s.Offsets(ctx, "g", "t"); err != nil || got[0] != 1 {
		t.Fatalf("Offsets after purging = %v, %v; want them kept", got, err)
	}
}
