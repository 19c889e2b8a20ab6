package pgoutbox

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// TestHealthTimesSlots covers what a real server cannot show without a
// standby: a replication slot holding xmin has no start time, so Health
// times it from the first call that sees it hold the same xmin, starts
// over when the xmin moves, and forgets a slot that is gone.
func TestHealthTimesSlots(t *testing.T) {
	t.Parallel()
	b := &Backend{opts: Options{XminHorizonWarning: time.Minute, Logger: slog.New(slog.DiscardHandler)}}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	slot := func(xmin string) healthHolder {
		return healthHolder{Kind: "slot", ID: "standby_1", State: "inactive", XIDs: 1234, Xmin: xmin}
	}
	tables := []outbox.TableHealth{{Name: "public.outbox", Bytes: 2 << 20, DeadRows: 5000}}
	call := func(at time.Time, hs ...healthHolder) []outbox.HealthWarning {
		return b.holderWarnings(healthRow{now: at, holders: hs}, tables)
	}

	if ws := call(t0, slot("100")); len(ws) != 0 {
		t.Fatalf("first sight: %+v, want no warning (held for 0s as far as Health knows)", ws)
	}
	if ws := call(t0.Add(59*time.Second), slot("100")); len(ws) != 0 {
		t.Fatalf("59s: %+v, want none (bound 1m)", ws)
	}
	ws := call(t0.Add(90*time.Second), slot("100"))
	if len(ws) != 1 || ws[0].Code != WarnXminHorizonHeld || ws[0].Object != "replication slot standby_1" {
		t.Fatalf("90s: %+v, want one xmin-horizon-held for the slot", ws)
	}
	for _, want := range []string{"inactive replication slot 'standby_1'", "xmin 100", "at least 1m30s", "1234 transactions", "5000 dead rows", "2.0 MiB", "SELECT pg_drop_replication_slot('standby_1');"} {
		if !strings.Contains(ws[0].Message, want) {
			t.Errorf("message %q lacks %q", ws[0].Message, want)
		}
	}
	if ws := call(t0.Add(2*time.Minute), slot("200")); len(ws) != 0 {
		t.Fatalf("xmin moved: %+v, want none (timed anew)", ws)
	}
	call(t0.Add(3 * time.Minute)) // the slot is gone
	if ws := call(t0.Add(4*time.Minute), slot("200")); len(ws) != 0 {
		t.Fatalf("slot back after it was gone: %+v, want none (timed anew)", ws)
	}
	if len(b.health.firstSeen) != 1 {
		t.Fatalf("firstSeen holds %d holders, want 1 (only those of the last call)", len(b.health.firstSeen))
	}

	// A negative bound looks for nothing.
	off := &Backend{opts: Options{XminHorizonWarning: -1, Logger: slog.New(slog.DiscardHandler)}}
	if ws := off.holderWarnings(healthRow{now: t0, holders: []healthHolder{slot("1")}}, tables); ws != nil {
		t.Fatalf("negative bound: %+v", ws)
	}
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1 << 20: "1.0 MiB", 5 << 30: "5.0 GiB", 3 << 40: "3.0 TiB", 2048 << 40: "2048.0 TiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
