package mysqloutbox_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

func entryIDs(infos []outbox.EntryInfo) []string {
	var out []string
	for _, i := range infos {
		out = append(out, i.ID)
	}
	return out
}

func TestEntriesByStateAndFilter(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2})
	ctx := context.Background()
	sched := raw("sched", "k1")
	sched.dueIn = time.Hour
	retrying := raw("retrying", "k2")
	retrying.attempts, retrying.lastErr, retrying.dueIn = 1, "Broker DOWN: Ärger", time.Hour
	parked := raw("parked", "k3")
	parked.parked, parked.attempts, parked.lastErr = true, 5, "broker down"
	other := raw("other", "k1 ")
	other.topic = "orders " // differs from "orders" only by a trailing space
	insertRaw(t, db, 2, raw("due-b", "k1"), raw("due-a", "k2"), sched, retrying, parked, other)

	for _, c := range []struct {
		state  outbox.EntryState
		filter outbox.ListFilter
		want   []string
	}{
		{outbox.StateDue, outbox.ListFilter{}, []string{"due-a", "due-b", "other"}},
		{outbox.StateScheduled, outbox.ListFilter{}, []string{"sched"}},
		{outbox.StateRetrying, outbox.ListFilter{}, []string{"retrying"}},
		{outbox.StateParked, outbox.ListFilter{}, []string{"parked"}},
		{outbox.StateDue, outbox.ListFilter{Topic: "orders"}, []string{"due-a", "due-b"}},
		{outbox.StateDue, outbox.ListFilter{Topic: "orders "}, []string{"other"}},
		{outbox.StateDue, outbox.ListFilter{Key: "k1"}, []string{"due-b"}},
		{outbox.StateRetrying, outbox.ListFilter{Error: "broker down"}, []string{"retrying"}},
		{outbox.StateRetrying, outbox.ListFilter{Error: "ÄRGER"}, []string{"retrying"}}, // RGER folds, Ä matches itself
		{outbox.StateRetrying, outbox.ListFilter{Error: "ärger"}, nil},
		{outbox.StateRetrying, outbox.ListFilter{Error: "down: Ärger"}, []string{"retrying"}},
		{outbox.StateParked, outbox.ListFilter{Error: "BROKER"}, []string{"parked"}},
		{outbox.StateDue, outbox.ListFilter{Since: time.Now().Add(time.Hour)}, nil},
		{outbox.StateDue, outbox.ListFilter{Until: time.Now().Add(-time.Hour)}, nil},
		{outbox.StateDue, outbox.ListFilter{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)}, []string{"due-a", "due-b", "other"}},
	} {
		got, err := b.Entries(ctx, c.state, c.filter, "", 10)
		if err != nil {
			t.Fatalf("Entries(%s, %+v): %v", c.state, c.filter, err)
		}
		if !slices.Equal(entryIDs(got), c.want) {
			t.Errorf("Entries(%s, %+v) = %v; want %v", c.state, c.filter, entryIDs(got), c.want)
		}
	}
	page, err := b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "due-a", 1)
	if err != nil || !slices.Equal(entryIDs(page), []string{"due-b"}) {
		t.Errorf("Entries(due, after due-a, limit 1) = %v, %v; want due-b", entryIDs(page), err)
	}
	if _, err := b.Entries(ctx, "stuck", outbox.ListFilter{}, "", 1); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("Entries of an unknown state: %v; want ErrInvalidArgument", err)
	}
	if _, err := b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "", 0); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("Entries with limit 0: %v; want ErrInvalidArgument", err)
	}
}

func TestBlockedKeysHeadsWaitingAndSince(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	failing := raw("failing", "k")
	failing.attempts, failing.lastErr = 2, "timeout"
	failing.history = `[{"at": "2026-01-02T03:04:05.000001Z", "error": "timeout", "owner": "r"}]`
	deferred := raw("deferred", "d")
	deferred.deferred, deferred.dueIn = true, time.Hour
	badHistory := raw("bad-history", "h")
	badHistory.attempts, badHistory.history = 1, `[{"at": "yesterday"}]`
	insertRaw(t, db, 1, failing, raw("k2", "k"), raw("k3", "k"), deferred, raw("free", "f"), badHistory, raw("paused", "p"), raw("p2", "p"))
	paused := raw("paused-topic", "q")
	paused.topic = "halted"
	insertRaw(t, db, 1, paused, raw("q2", "q"))
	if err := b.PauseTopic(ctx, "halted"); err != nil {
		t.Fatal(err)
	}

	keys, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var heads []string
	for _, k := range keys {
		heads = append(heads, k.Head.ID)
	}
	// failing's Since is from its history (2026-01-02); the others' from
	// their creation time, in insert order; ties by ID.
	if len(keys) != 4 || heads[0] != "failing" {
		t.Fatalf("BlockedKeys heads = %v; want failing first, then deferred, bad-history and paused-topic", heads)
	}
	if keys[0].Waiting != 2 || !keys[0].Since.Equal(time.Date(2026, 1, 2, 3, 4, 5, 1000, time.UTC)) || keys[0].Head.Attempts != 2 {
		t.Errorf("BlockedKeys[0] = %+v; want Waiting 2, Since the first attempt's time", keys[0])
	}
	for _, k := range keys[1:] {
		if k.Since.IsZero() || k.Since.Sub(k.Head.CreatedAt).Abs() > 0 {
			t.Errorf("BlockedKey %s: Since %s; want its CreatedAt %s", k.Head.ID, k.Since, k.Head.CreatedAt)
		}
	}
	page, err := b.BlockedKeys(ctx, outbox.ListFilter{}, keys[1], 10)
	if err != nil || len(page) != 2 || page[0].Head.ID != keys[2].Head.ID {
		t.Errorf("BlockedKeys after %s = %d keys, %v; want the last two", keys[1].Head.ID, len(page), err)
	}
	filtered, err := b.BlockedKeys(ctx, outbox.ListFilter{Topic: "halted"}, outbox.BlockedKey{}, 10)
	if err != nil || len(filtered) != 1 || filtered[0].Head.ID != "paused-topic" || filtered[0].Waiting != 1 {
		t.Errorf("BlockedKeys of topic halted = %+v, %v; want paused-topic, waiting 1", filtered, err)
	}
	if err := b.ResumeTopic(ctx, "halted"); err != nil {
		t.Fatal(err)
	}
	if keys, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10); err != nil || len(keys) != 3 {
		t.Errorf("BlockedKeys after ResumeTopic = %d keys, %v; want 3", len(keys), err)
	}
}

// pauseAll pauses topics and partitions.
func pauseAll(t *testing.T, b *mysqloutbox.Backend, topics []string, partitions []int) {
	t.Helper()
	for _, topic := range topics {
		if err := b.PauseTopic(context.Background(), topic); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range partitions {
		if err := b.PausePartition(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPauseRowsUseTheServerClock(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 4})
	ctx := context.Background()
	start := serverNow(t, db)
	pauseAll(t, b, []string{"b", "a", "B"}, []int{3, 1})
	end := serverNow(t, db)
	first, err := b.Paused(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for _, p := range first.Topics {
		topics = append(topics, p.Topic)
		if p.Since.Before(start) || p.Since.After(end) {
			t.Errorf("topic %s paused since %s; want the server's clock, in [%s, %s]", p.Topic, p.Since, start, end)
		}
	}
	if !slices.Equal(topics, []string{"B", "a", "b"}) || len(first.Partitions) != 2 || first.Partitions[0].Partition != 1 || first.Partitions[1].Partition != 3 {
		t.Fatalf("Paused = %+v; want topics B a b (byte order), partitions 1 3", first)
	}
	time.Sleep(5 * time.Millisecond)
	pauseAll(t, b, []string{"a"}, []int{1})
	again, err := b.Paused(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Topics[1].Since.Equal(first.Topics[1].Since) || !again.Partitions[0].Since.Equal(first.Partitions[0].Since) {
		t.Errorf("pausing again changed since: %+v, then %+v; want it kept", first, again)
	}
	var rows int
	if err := db.QueryRow("SELECT COUNT(*) FROM `outbox_pause_topic`").Scan(&rows); err != nil || rows != 3 {
		t.Errorf("outbox_pause_topic holds %d rows (%v); want 3", rows, err)
	}
	for _, topic := range []string{"a", "B", "never"} {
		if err := b.ResumeTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.ResumePartition(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := b.ResumePartition(ctx, 2); err != nil {
		t.Fatal(err)
	}
	last, err := b.Paused(ctx)
	if err != nil || len(last.Topics) != 1 || last.Topics[0].Topic != "b" || len(last.Partitions) != 1 || last.Partitions[0].Partition != 1 {
		t.Errorf("Paused after the resumes = %+v, %v; want topic b, partition 1", last, err)
	}
}

func TestPauseRejectsInvalidArguments(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{Partitions: 4})
	ctx := context.Background()
	for name, err := range map[string]error{
		"PauseTopic(\"\")":      b.PauseTopic(ctx, ""),
		"PauseTopic(invalid)":   b.PauseTopic(ctx, "\xff"),
		"PauseTopic(256 bytes)": b.PauseTopic(ctx, string(make([]byte, 256))),
		"ResumeTopic(\"\")":     b.ResumeTopic(ctx, ""),
		"PausePartition(4)":     b.PausePartition(ctx, 4),
		"ResumePartition(-1)":   b.ResumePartition(ctx, -1),
	} {
		if !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", name, err)
		}
	}
}
