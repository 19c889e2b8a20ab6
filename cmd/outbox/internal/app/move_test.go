package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/movecmd"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// moveEnd is one outbox of a move test: its flags for either side, the
// backend and how to append to it.
type moveEnd struct {
	url    string
	name   []string // "schema", NAME or "prefix", NAME
	store  outbox.Store
	append func(...outbox.Entry) error
}

// flags are the outbox's flags as the side (from or to) of a move.
func (e moveEnd) flags(side string) []string {
	return []string{"--" + side, e.url, "--" + side + "-" + e.name[0], e.name[1]}
}

// storeFlags are its flags for the other commands.
func (e moveEnd) storeFlags() []string {
	return []string{"--store", e.url, "--" + e.name[0], e.name[1]}
}

// pgEnd makes a Postgres outbox with the given partition count in a schema
// of the test's own. A URL of the test server without a password gets
// one it ignores, so every run checks that no password shows.
func pgEnd(t *testing.T, partitions int) moveEnd {
	t.Helper()
	ctx := context.Background()
	base, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	opts := pgoutbox.Options{Schema: schema, Partitions: partitions}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.User.Password(); !ok {
		u.User = url.UserPassword(u.User.Username(), "Mv-Secret-Pw9")
	}
	return moveEnd{url: u.String(), name: []string{"schema", schema}, store: b, append: func(e ...outbox.Entry) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, e...) })
	}}
}

// redisEnd makes a Redis outbox under a prefix of the test's own.
func redisEnd(t *testing.T, partitions int) moveEnd {
	t.Helper()
	ctx := context.Background()
	u, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return moveEnd{url: u, name: []string{"prefix", prefix}, store: b, append: func(e ...outbox.Entry) error { return b.Append(ctx, e...) }}
}

// requireMovable skips the test while a backend lacks the interfaces a
// move needs (they land backend by backend).
func requireMovable(t *testing.T, ends ...moveEnd) {
	t.Helper()
	for _, e := range ends {
		_, ex := e.store.(outbox.Exporter)
		_, im := e.store.(outbox.Importer)
		_, ho := e.store.(outbox.Holder)
		_, se := e.store.(outbox.Sealer)
		if !ex || !im || !ho || !se {
			t.Skipf("%T does not implement the move interfaces (Exporter, Importer, Holder, Sealer) yet", e.store)
		}
	}
}

// seedMove appends keys × 3 entries and puts one in each state: k0-0
// retrying (an hour ahead), k1-0 parked, k2-0 scheduled an hour ahead.
func seedMove(t *testing.T, e moveEnd, keys int) map[string]outbox.EntryInfo {
	t.Helper()
	ctx := context.Background()
	var entries []outbox.Entry
	for k := range keys {
		for i := range 3 {
			en := outbox.Entry{ID: fmt.Sprintf("k%d-%d", k, i), Topic: "orders", Key: fmt.Sprintf("k%d", k),
				Payload: []byte(fmt.Sprintf(`{"k":%d,"i":%d}`, k, i)), Headers: map[string]string{"i": fmt.Sprint(i)}}
			if k == 2 && i == 0 {
				en.NotBefore = time.Now().Add(time.Hour).Truncate(time.Millisecond)
			}
			entries = append(entries, en)
		}
	}
	if err := e.append(entries...); err != nil {
		t.Fatal(err)
	}
	fail := map[string]outbox.Failure{
		"k0-0": {ID: "k0-0", Error: "broker down", Delay: time.Hour},
		"k1-0": {ID: "k1-0", Error: "too large", Park: true},
	}
	for p := range e.store.Partitions() {
		l, err := e.store.AcquireLease(ctx, p, "seeder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := e.store.FindPendingBatch(ctx, l, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var fs []outbox.Failure
		var rest []string
		for _, x := range batch {
			if f, ok := fail[x.ID]; ok {
				fs = append(fs, f)
			} else {
				rest = append(rest, x.ID)
			}
		}
		if err := e.store.MarkFailed(ctx, l, fs); err != nil {
			t.Fatal(err)
		}
		if err := e.store.Release(ctx, l, rest); err != nil {
			t.Fatal(err)
		}
		if err := e.store.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]outbox.EntryInfo{}
	lk := e.store.(outbox.Looker)
	for _, x := range entries {
		info, err := lk.Lookup(ctx, x.ID)
		if err != nil {
			t.Fatal(err)
		}
		want[x.ID] = info
	}
	return want
}

// noSecret fails when the output of a run shows the password of a URL.
func noSecret(t *testing.T, r cliResult, urls ...string) {
	t.Helper()
	for _, u := range urls {
		for _, s := range cli.URLSecrets(u) {
			if len(s) >= cli.MinSecretLen && strings.Contains(r.stdout+r.stderr, s) {
				t.Fatalf("the output shows the password %q:\n%v", s, r)
			}
		}
	}
}

func moveStatus(t *testing.T, args ...string) (movecmd.MoveStatusJSON, cliResult) {
	t.Helper()
	r := runCLI(t, append([]string{"move", "-o", "json"}, args...)...)
	var s movecmd.MoveStatusJSON
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("move -o json: %v\n%v", err, r)
	}
	return s, r
}

// moveEndToEnd runs a whole move through the CLI: dry run, prepare, an
// append to the held destination, verify (incomplete), the move, verify
// (complete), and checks every entry arrived as it was.
func moveEndToEnd(t *testing.T, from, to moveEnd) {
	ctx := context.Background()
	requireMovable(t, from, to)
	want := seedMove(t, from, 30)
	args := append(from.flags("from"), to.flags("to")...)
	run := func(code int, extra ...string) cliResult {
		t.Helper()
		r := runCLI(t, append(append([]string{"move"}, args...), extra...)...)
		noSecret(t, r, from.url, to.url)
		if r.code != code {
			t.Fatalf("outbox move %s: want exit %d, got %v", strings.Join(extra, " "), code, r)
		}
		return r
	}

	r := run(0, "--dry-run")
	for _, w := range []string{"source:", "90 entries (87 due, 2 waiting, 1 parked); not sealed", "0 entries (0 due, 0 waiting, 0 parked); not held",
		"--prepare would hold the destination", "(dry run: nothing changed)", fmt.Sprintf("%d partitions", from.store.Partitions())} {
		if !strings.Contains(r.stdout, w) {
			t.Fatalf("dry run lacks %q:\n%v", w, r)
		}
	}
	s, r := moveStatus(t, append(args, "--dry-run")...)
	if s.Source.Total != 90 || s.Source.Due != 87 || s.Source.Waiting != 2 || s.Source.Parked != 1 || s.Sealed || s.Held != nil || s.Complete || s.Destination.Partitions != to.store.Partitions() {
		t.Fatalf("dry run -o json: %+v\n%v", s, r)
	}

	r = run(0, "--prepare")
	if !strings.Contains(r.stdout, "is held for move") || !strings.Contains(r.stdout, "next: deploy the destination's relays") {
		t.Fatalf("prepare:\n%v", r)
	}
	run(0, "--prepare") // again: a no-op
	st := cliOK(t, append([]string{"status"}, to.storeFlags()...)...)
	if !strings.Contains(st, "held: outbox move ") {
		t.Fatalf("status of the destination does not show the hold:\n%s", st)
	}
	// The rollout: a service appends to the destination.
	if err := to.append(outbox.Entry{ID: "new-k0", Topic: "orders", Key: "k0"}); err != nil {
		t.Fatal(err)
	}

	r = run(1, "--verify")
	if !strings.Contains(r.stdout, "the move is not complete: the source is not sealed, the source still holds 90 entries") || !strings.Contains(r.stderr, "not complete") {
		t.Fatalf("verify before the move:\n%v", r)
	}
	// Without --yes and without a terminal: refused, nothing changed.
	r = run(2)
	if !strings.Contains(r.stderr, "pass --yes") {
		t.Fatalf("move without --yes:\n%v", r)
	}
	if sealed, _ := from.store.(outbox.Sealer).Sealed(ctx); sealed {
		t.Fatal("the refused move sealed the source")
	}

	r = run(0, "--yes", "--batch", "7")
	if !strings.Contains(r.stdout, "moved 90 entries (87 due, 2 waiting, 1 parked)") || !strings.Contains(r.stdout, "is released: its relays deliver now") {
		t.Fatalf("move:\n%v", r)
	}
	r = run(0, "--verify")
	if !strings.Contains(r.stdout, "the move is complete") {
		t.Fatalf("verify after the move:\n%v", r)
	}
	s, _ = moveStatus(t, append(args, "--verify")...)
	if !s.Complete || !s.Sealed || s.Held != nil || s.Source.Total != 0 || s.Destination.Total != 91 {
		t.Fatalf("verify -o json: %+v", s)
	}
	r = run(0, "--yes")
	if !strings.Contains(r.stdout, "complete: nothing to do") {
		t.Fatalf("move again:\n%v", r)
	}
	st = cliOK(t, append([]string{"status"}, from.storeFlags()...)...)
	if !strings.Contains(st, "sealed: appends fail") {
		t.Fatalf("status of the source does not show the seal:\n%s", st)
	}
	if err := from.append(outbox.Entry{Topic: "orders", Key: "late"}); err == nil || !strings.Contains(err.Error(), "sealed") {
		t.Fatalf("append to the sealed source: %v", err)
	}

	lk := to.store.(outbox.Looker)
	for id, w := range want {
		got, err := lk.Lookup(ctx, id)
		if err != nil {
			t.Fatalf("Lookup(%s) in the destination: %v", id, err)
		}
		if got.Topic != w.Topic || got.Key != w.Key || string(got.Payload) != string(w.Payload) || got.Headers["i"] != w.Headers["i"] ||
			got.Attempts != w.Attempts || got.LastError != w.LastError || got.Parked != w.Parked || !got.NotBefore.Equal(w.NotBefore) ||
			got.Partition != outbox.PartitionOf(w.Key, to.store.Partitions()) {
			t.Errorf("entry %s moved as %+v, was %+v", id, got, w)
		}
		if w.DueAt.After(time.Now()) && got.DueAt.Sub(w.DueAt).Abs() > 5*time.Millisecond {
			t.Errorf("entry %s is due at %v, was due at %v", id, got.DueAt, w.DueAt)
		}
	}
	// The destination's relay delivers k0's moved entries before the one
	// appended to it: k0-0 waits for its retry and holds back the rest.
	l, err := to.store.AcquireLease(ctx, outbox.PartitionOf("k0", to.store.Partitions()), "relay", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := to.store.FindPendingBatch(ctx, l, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range batch {
		if e.Key == "k0" {
			t.Fatalf("the destination hands out %s while the moved k0-0 waits for its retry", e.ID)
		}
	}
}

func TestMovePostgresToRedis(t *testing.T) {
	t.Parallel()
	moveEndToEnd(t, pgEnd(t, 4), redisEnd(t, 8))
}

func TestMoveRedisToPostgres(t *testing.T) {
	t.Parallel()
	moveEndToEnd(t, redisEnd(t, 8), pgEnd(t, 4))
}

func TestMovePostgresReshard(t *testing.T) {
	t.Parallel()
	moveEndToEnd(t, pgEnd(t, 4), pgEnd(t, 16))
}

// TestMoveRollback: --release before the seal, --unseal after it, and the
// refusal to release a sealed source's destination with entries left.
func TestMoveRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	from, to := pgEnd(t, 2), pgEnd(t, 3)
	requireMovable(t, from, to)
	seedMove(t, from, 3)
	args := append([]string{"move"}, append(from.flags("from"), to.flags("to")...)...)
	with := func(extra ...string) []string { return append(append([]string{}, args...), extra...) }

	if got := cliOK(t, with("--release")...); !strings.Contains(got, "is not held: nothing to release") {
		t.Fatalf("release of an unheld destination:\n%s", got)
	}
	cliOK(t, with("--prepare")...)
	if got := cliOK(t, with("--release")...); !strings.Contains(got, "released the destination") {
		t.Fatalf("release:\n%s", got)
	}
	if hs, _ := to.store.(outbox.Holder).HoldState(ctx); hs.Held {
		t.Fatal("still held after --release")
	}
	cliOK(t, with("--prepare")...)
	if err := from.store.(outbox.Sealer).Seal(ctx); err != nil {
		t.Fatal(err)
	}
	cliFails(t, 1, []string{"the source is sealed and still holds 9 entries", "--unseal"}, with("--release")...)
	if got := cliOK(t, with("--unseal")...); !strings.Contains(got, "unsealed the source") || !strings.Contains(got, "the destination is still held") {
		t.Fatalf("unseal:\n%s", got)
	}
	if got := cliOK(t, with("--unseal")...); !strings.Contains(got, "is not sealed: nothing to unseal") {
		t.Fatalf("unseal again:\n%s", got)
	}
	cliOK(t, with("--release")...)
	if err := from.append(outbox.Entry{Topic: "t"}); err != nil {
		t.Fatalf("append after --unseal: %v", err)
	}
}

// TestMoveBadInput: each bad input is refused with what is wrong and the
// fix, nothing changes, and no password shows.
func TestMoveBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	from, to := pgEnd(t, 2), pgEnd(t, 2)
	requireMovable(t, from, to)
	seedMove(t, from, 3)
	both := append(from.flags("from"), to.flags("to")...)
	check := func(code int, want []string, args ...string) {
		t.Helper()
		r := cliFails(t, code, want, append([]string{"move"}, args...)...)
		noSecret(t, r, from.url, to.url)
	}
	unchanged := func() {
		t.Helper()
		if sealed, _ := from.store.(outbox.Sealer).Sealed(ctx); sealed {
			t.Fatal("the source was sealed")
		}
		if hs, _ := to.store.(outbox.Holder).HoldState(ctx); hs.Held {
			t.Fatal("the destination was held")
		}
	}

	check(2, []string{"same outbox", "--to-schema"}, append(from.flags("from"), from.flags("to")...)...)
	// The same outbox spelt another way: default schema named or not, URL
	// parameters and user differ.
	other, err := url.Parse(from.url)
	if err != nil {
		t.Fatal(err)
	}
	other.User = url.UserPassword("other", "Other-Pw-77")
	q := other.Query()
	q.Set("application_name", "x")
	other.RawQuery = q.Encode()
	check(2, []string{"same outbox"}, "--from", from.url, "--to", other.String(), "--from-schema", "public", "--to-table", "outbox")
	check(2, []string{"no destination given", "--to URL", "OUTBOX_MOVE_TO"}, from.flags("from")...)
	check(2, []string{"no source given", "--from URL"}, to.flags("to")...)
	check(2, []string{"--from-prefix names a Redis outbox", "--from-schema"}, append([]string{"--from", from.url, "--from-prefix", "{x}"}, to.flags("to")...)...)
	check(2, []string{"the destination (--to)", "--to-prefix \"nope\" must hold exactly one non-empty {hash tag}"}, append(from.flags("from"), "--to", "redis://127.0.0.1:1/0", "--to-prefix", "nope")...)
	check(2, []string{"--dry-run and --verify"}, append(both, "--dry-run", "--verify")...)
	check(2, []string{"-o json is for --dry-run and --verify"}, append(both, "--prepare", "-o", "json")...)
	check(2, []string{"--batch must be at least 1"}, append(both, "--batch", "0")...)
	check(1, []string{"the destination (--to)", "no outbox at", "outbox migrate up --store URL --schema no_such_schema_x --partitions N"}, append(from.flags("from"), "--to", to.url, "--to-schema", "no_such_schema_x")...)
	check(2, []string{"the source (--from)", "store URL has no scheme"}, append([]string{"--from", "localhost/db"}, to.flags("to")...)...)
	unchanged()

	// A move that was not prepared.
	check(1, []string{"not held by a move from", "--prepare"}, append(both, "--yes")...)
	unchanged()

	// A destination that is not empty.
	if err := to.append(outbox.Entry{ID: "x1", Topic: "t", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	check(1, []string{"destination is not empty (1 entries (1 due, 0 waiting, 0 parked))", "not prepared"}, append(both, "--prepare")...)
	if got := cliOK(t, append([]string{"move"}, append(both, "--dry-run")...)...); !strings.Contains(got, "--prepare would refuse the destination, which is not empty") {
		t.Fatalf("dry run on a non-empty destination:\n%s", got)
	}
	unchanged()
	if err := to.store.(outbox.Canceler).Cancel(ctx, "x1"); err != nil {
		t.Fatal(err)
	}

	// A conflict: the destination holds k1-1 with another payload.
	cliOK(t, append([]string{"move"}, append(both, "--prepare")...)...)
	if err := to.append(outbox.Entry{ID: "k1-1", Topic: "orders", Key: "k1", Payload: []byte("another")}); err != nil {
		t.Fatal(err)
	}
	check(1, []string{`ID "k1-1"`, "payload differs", "outbox cancel k1-1"}, append(both, "--yes")...)
	if _, err := from.store.(outbox.Looker).Lookup(ctx, "k1-1"); err != nil {
		t.Fatalf("the conflicting entry left the source: %v", err)
	}
	if err := to.store.(outbox.Canceler).Cancel(ctx, "k1-1"); err != nil {
		t.Fatal(err)
	}
	if got := cliOK(t, append([]string{"move"}, append(both, "--yes")...)...); !strings.Contains(got, "skipped") {
		t.Fatalf("the resumed move skipped nothing:\n%s", got)
	}
}

// TestMoveJSONHelp: 'outbox help json' names every key of the move and
// status shapes.
func TestMoveJSONHelp(t *testing.T) {
	t.Parallel()
	text := cliOK(t, "help", "json")
	id := "m"
	for _, v := range []any{
		movecmd.MoveStatusJSON{Held: &cli.HoldJSON{}, MoveID: &id},
		admincmd.StatusJSON{Held: &cli.HoldJSON{}, Sealed: new(bool)},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var keys func(any)
		keys = func(x any) {
			if mm, ok := x.(map[string]any); ok {
				for k, v := range mm {
					if !strings.Contains(text, `"`+k+`"`) {
						t.Errorf("'outbox help json' does not name %q", k)
					}
					keys(v)
				}
			}
		}
		keys(m)
	}
}

func TestMoveHelp(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "move", "--help")
	for _, w := range []string{"Usage: outbox move", "--from=URL", "--to=URL", "--from-schema", "--to-prefix", "--dry-run", "--prepare", "--verify", "--release", "--unseal", "--yes", "--output"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("outbox move --help lacks %s:\n%s", w, r.stdout)
		}
	}
}
