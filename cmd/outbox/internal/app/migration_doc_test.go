package app

// TestMigrationDocExample runs the worked example of docs/migration.md: the
// ```console block after the "<!-- migration-example:" marker. Lines that
// start with "$ " are commands, lines that start with "# " comments, and the
// other lines the output the command before them prints (stdout, then
// stderr, then "exit N" for a command ending in `|| echo "exit $?"`).
//
//   - `export NAME='VALUE'` sets PG or REDIS: the test's own server URL
//     stands in for VALUE (and VALUE for it in the outputs);
//   - `outbox relay ... &` starts a relay of that outbox in process (the
//     relay `outbox relay` runs, publishing to memory instead of Kafka);
//     `kill %N` stops the N-th with Relay.Stop, as SIGTERM does;
//   - every other `outbox ...` command runs in process and must exit 0, or
//     non-zero when it ends in `|| echo "exit $?"`;
//   - `# services ... append N entries[, and M scheduled an hour ahead,] to
//     the source|destination` appends them to the Postgres (source) or Redis
//     (destination) outbox, as the services would;
//   - the outbox names billing (--schema) and {billing} (--prefix) become a
//     schema and a prefix of the test's own.
//
// Before each command it waits until each running relay whose outbox is not
// held has delivered what is due, so the counts do not depend on timing.
// Output lines are compared with runs of blanks made one; "…" in a line
// matches any text, and a line that is only "…" any number of lines.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

const (
	migrationDoc    = "../../../../docs/migration.md"
	migrationMarker = "<!-- migration-example:"
	// The names the example gives the two outboxes.
	docSchema = "billing"
	docPrefix = "{billing}"
)

// docStep is one line of the example: a command or a comment, with the
// output the doc shows after it.
type docStep struct {
	line    int // in the doc, 1-based
	command string
	comment string
	want    []string
}

// migrationExample returns the steps of the worked example.
func migrationExample(t *testing.T) []docStep {
	t.Helper()
	data, err := os.ReadFile(migrationDoc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), migrationMarker) {
			start = i + 1
			break
		}
	}
	if start < 0 || start >= len(lines) || strings.TrimSpace(lines[start]) != "```console" {
		t.Fatalf("%s: no ```console block right after a line starting with %q", migrationDoc, migrationMarker)
	}
	var steps []docStep
	for i := start + 1; ; i++ {
		if i >= len(lines) {
			t.Fatalf("%s: the example's block (line %d) is not closed", migrationDoc, start+1)
		}
		l := strings.TrimRight(lines[i], " \t\r")
		switch {
		case l == "```":
			return steps
		case strings.HasPrefix(l, "$ "):
			steps = append(steps, docStep{line: i + 1, command: strings.TrimPrefix(l, "$ ")})
		case strings.HasPrefix(l, "# "):
			steps = append(steps, docStep{line: i + 1, comment: strings.TrimPrefix(l, "# ")})
		case len(steps) == 0 || steps[len(steps)-1].command == "":
			if l != "" {
				t.Fatalf("%s:%d: output %q follows no command", migrationDoc, i+1, l)
			}
		default:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l)
		}
	}
}

// shellWords splits a command line as sh would for the forms the doc uses:
// blanks between words, '...' taken as is, "..." and bare words with $NAME
// and ${NAME} expanded from vars (an unknown name is an error).
func shellWords(line string, vars map[string]string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	expand := func(s string, i int) (int, error) { // s[i] == '$'
		j := i + 1
		braced := j < len(s) && s[j] == '{'
		if braced {
			j++
		}
		k := j
		for k < len(s) && (s[k] == '_' || s[k] >= 'A' && s[k] <= 'Z' || s[k] >= 'a' && s[k] <= 'z' || s[k] >= '0' && s[k] <= '9') {
			k++
		}
		name := s[j:k]
		if braced {
			if k >= len(s) || s[k] != '}' {
				return 0, fmt.Errorf("unclosed ${ in %q", s)
			}
			k++
		}
		v, ok := vars[name]
		if name == "" || !ok {
			return 0, fmt.Errorf("$%s is not set", name)
		}
		cur.WriteString(v)
		return k, nil
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
			i++
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+end])
			inWord, i = true, i+end+2
		case c == '"':
			inWord = true
			i++
			for {
				if i >= len(line) {
					return nil, fmt.Errorf("unclosed \" in %q", line)
				}
				if line[i] == '"' {
					i++
					break
				}
				if line[i] == '$' {
					var err error
					if i, err = expand(line, i); err != nil {
						return nil, err
					}
					continue
				}
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				cur.WriteByte(line[i])
				i++
			}
		case c == '$':
			inWord = true
			var err error
			if i, err = expand(line, i); err != nil {
				return nil, err
			}
		default:
			inWord = true
			cur.WriteByte(c)
			i++
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// normLine makes runs of blanks one and trims the line.
func normLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// docLines are the non-empty lines of text, normalized.
func docLines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l = normLine(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// lineMatches reports whether got matches want, in which "…" matches any
// text.
func lineMatches(want, got string) bool {
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(got)
}

// linesMatch reports whether got matches want line by line, where a want
// line that is only "…" matches any number of lines.
func linesMatch(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "…" {
		for i := 0; i <= len(got); i++ {
			if linesMatch(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && lineMatches(want[0], got[0]) && linesMatch(want[1:], got[1:])
}

func TestMigrationDocMatcher(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		want, got []string
		ok        bool
	}{
		{[]string{"a"}, []string{"a"}, true},
		{[]string{"a"}, []string{"a", "b"}, false},
		{[]string{"moved … in …"}, []string{"moved 3 entries in 12ms"}, true},
		{[]string{"moved … in …"}, []string{"moved 3 entries"}, false},
		{[]string{"x", "…", "all 1"}, []string{"x", "0 1", "1 0", "all 1"}, true},
		{[]string{"x", "…", "all 1"}, []string{"x", "all 1"}, true},
		{[]string{"x", "…", "all 1"}, []string{"x", "all 2"}, false},
		{[]string{"a (b) [c] $d"}, []string{"a (b) [c] $d"}, true},
	} {
		if got := linesMatch(tc.want, tc.got); got != tc.ok {
			t.Errorf("linesMatch(%q, %q) = %v, want %v", tc.want, tc.got, got, tc.ok)
		}
	}
	vars := map[string]string{"PG": "postgres://h/db?x=1"}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`outbox status --store "$PG" --schema billing`, []string{"outbox", "status", "--store", "postgres://h/db?x=1", "--schema", "billing"}},
		{`x --prefix '{billing}' ${PG}/a`, []string{"x", "--prefix", "{billing}", "postgres://h/db?x=1/a"}},
		{`export A='p q'`, []string{"export", "A=p q"}},
	} {
		got, err := shellWords(tc.line, vars)
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("shellWords(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
	if _, err := shellWords(`a "$NOPE"`, vars); err == nil {
		t.Error("an unset variable was expanded")
	}
}

// exampleRelay is a relay the example started with `outbox relay ... &`.
type exampleRelay struct {
	opened *cli.Opened
	relay  *outbox.Relay
	name   string
}

// deliveries records what the example's relays published, in order.
type deliveries struct {
	mu  sync.Mutex
	ids []string
}

func (d *deliveries) add(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids = append(d.ids, id)
}

func (d *deliveries) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.ids...)
}

var servicesLine = regexp.MustCompile(`^services\b.* append (\d+) entries(?:, and (\d+) scheduled an hour ahead,)? to the (source|destination)$`)

func TestMigrationDocExample(t *testing.T) {
	t.Parallel()
	steps := migrationExample(t)
	if len(steps) == 0 {
		t.Fatalf("%s: the example has no commands", migrationDoc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgURL, pool := cliPostgres(t)
	redisURL, client := cliRedis(t)
	schema := cliSchema(t, pool)
	prefix := cliPrefix(t, client)

	vars := map[string]string{}      // the example's variables, as the test sets them
	testValues := map[string]string{ // what the test gives each
		"PG": pgURL, "REDIS": redisURL,
	}
	var replace []string // test's text -> doc's text, for the outputs
	var relays []*exampleRelay
	t.Cleanup(func() {
		for _, r := range relays {
			if r.relay != nil {
				sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = r.relay.Stop(sctx)
				scancel()
				r.opened.Close()
			}
		}
	})
	delivered := &deliveries{}
	var sourceIDs, destIDs []string
	moveStarted := false

	// The example's outboxes as services see them, opened on first use.
	var src, dst outbox.Store
	appendTo := func(side string, entries []outbox.Entry) {
		t.Helper()
		switch side {
		case "source":
			if src == nil {
				b, err := pgoutbox.New(ctx, pool, pgoutbox.Options{Schema: schema})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				src = b
			}
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return src.(*pgoutbox.Backend).AppendInTx(ctx, tx, entries...) }); err != nil {
				t.Fatalf("appending to the source: %v", err)
			}
		default:
			if dst == nil {
				b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				dst = b
			}
			cmds, err := client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				return dst.(*redisoutbox.Backend).AppendInTx(ctx, pipe, entries...)
			})
			if err := redisoutbox.CheckExec(cmds, err); err != nil {
				t.Fatalf("appending to the destination: %v", err)
			}
		}
	}

	// settle waits until every running relay whose outbox is not held has
	// nothing due.
	settle := func(at int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, r := range relays {
			if r.relay == nil {
				continue
			}
			for {
				hs, err := r.opened.Store.(outbox.Holder).HoldState(ctx)
				if err != nil {
					t.Fatal(err)
				}
				st, err := r.opened.Store.(outbox.Inspector).Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if hs.Held || st.Due == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s:%d: the relay of %s still has %d entries due after 10 s", migrationDoc, at, r.name, st.Due)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	for _, s := range steps {
		if s.comment != "" {
			m := servicesLine.FindStringSubmatch(s.comment)
			if m == nil {
				continue // a comment for the reader
			}
			due, _ := strconv.Atoi(m[1])
			later, _ := strconv.Atoi(m[2])
			var entries []outbox.Entry
			for i := range due + later {
				e := outbox.Entry{ID: fmt.Sprintf("%s-%d", m[3], i), Topic: "orders", Key: fmt.Sprintf("order-%d", i%10),
					Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
				if i >= due {
					e.Topic, e.NotBefore = "reminders", time.Now().Add(time.Hour)
				}
				entries = append(entries, e)
				if m[3] == "source" {
					sourceIDs = append(sourceIDs, e.ID)
				} else {
					destIDs = append(destIDs, e.ID)
				}
			}
			appendTo(m[3], entries)
			continue
		}

		cmdline := s.command
		background := strings.HasSuffix(cmdline, " &")
		cmdline = strings.TrimSuffix(cmdline, " &")
		mayFail := strings.HasSuffix(cmdline, ` || echo "exit $?"`)
		cmdline = strings.TrimSuffix(cmdline, ` || echo "exit $?"`)
		words, err := shellWords(cmdline, vars)
		if err != nil {
			t.Fatalf("%s:%d: %v", migrationDoc, s.line, err)
		}
		where := fmt.Sprintf("%s:%d: %s", migrationDoc, s.line, s.command)

		switch {
		case len(words) == 2 && words[0] == "export":
			name, docValue, ok := strings.Cut(words[1], "=")
			test, known := testValues[name]
			if !ok || !known {
				t.Fatalf("%s: the test knows no value for %s", where, name)
			}
			vars[name] = test
			tt, err := cli.ParseStore(test)
			if err != nil {
				t.Fatal(err)
			}
			dt, err := cli.ParseStore(docValue)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			// The move's name for the outbox (no user, no parameters),
			// then the URL as messages show it.
			storePart := func(st *cli.StoreTarget) string {
				id := cli.Identity(st, cli.StoreFlags{})
				if st.Kind == "postgres" {
					id, _, _ = strings.Cut(id, " ")
				} else {
					id, _, _ = strings.Cut(id, " prefix ")
				}
				return id
			}
			replace = append(replace, tt.Where, dt.Where, storePart(tt), storePart(dt))
			if len(s.want) > 0 {
				t.Fatalf("%s: export prints nothing", where)
			}
			continue

		case len(words) >= 2 && words[0] == "kill" && strings.HasPrefix(words[1], "%"):
			n, err := strconv.Atoi(words[1][1:])
			if err != nil || n < 1 || n > len(relays) || relays[n-1].relay == nil {
				t.Fatalf("%s: no job %s running", where, words[1])
			}
			r := relays[n-1]
			sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
			err = r.relay.Stop(sctx)
			scancel()
			if err != nil {
				t.Fatalf("%s: stopping the relay: %v", where, err)
			}
			r.opened.Close()
			r.relay = nil
			continue

		case len(words) == 0 || words[0] != "outbox":
			t.Fatalf("%s: the test does not know how to run this", where)
		}

		args := renameOutboxes(words[1:], schema, prefix)
		if args[0] == "relay" {
			if !background {
				t.Fatalf("%s: outbox relay runs until stopped: end it with &", where)
			}
			r := startExampleRelay(t, ctx, args, delivered)
			r.name = fmt.Sprintf("job %%%d", len(relays)+1)
			relays = append(relays, r)
			if len(s.want) > 0 {
				t.Fatalf("%s: the test shows no output of a background relay", where)
			}
			continue
		}
		if background {
			t.Fatalf("%s: only outbox relay runs in the background here", where)
		}

		settle(s.line)
		if !moveStarted && len(args) > 0 && args[0] == "move" && !hasAny(args, "--dry-run", "--verify", "--prepare", "--release", "--unseal") {
			moveStarted = true
			for _, id := range delivered.list() {
				if strings.HasPrefix(id, "destination-") {
					t.Errorf("%s: entry %s of the held destination was delivered before the move", where, id)
				}
			}
		}
		r := runCLI(t, args...)
		noSecret(t, r, pgURL, redisURL)
		switch {
		case mayFail && r.code == 0:
			t.Fatalf("%s: the doc shows a failure, but it exited 0:\n%v", where, r)
		case !mayFail && r.code != 0:
			t.Fatalf("%s: want exit 0, got %v", where, r)
		}
		out := r.stdout + r.stderr
		if mayFail {
			out += fmt.Sprintf("exit %d\n", r.code)
		}
		out = strings.NewReplacer(append(replace, schema, docSchema, prefix, docPrefix)...).Replace(out)
		want := make([]string, 0, len(s.want))
		for _, w := range s.want {
			if w = normLine(w); w != "" {
				want = append(want, w)
			}
		}
		if got := docLines(out); !linesMatch(want, got) {
			t.Errorf("%s: the output does not match the doc\n--- doc shows\n%s\n--- got (normalized)\n%s\n--- raw\n%v",
				where, strings.Join(want, "\n"), strings.Join(got, "\n"), r)
		}
	}
	if t.Failed() {
		return
	}

	// What the relays delivered: every due entry of the source, every
	// entry of the destination after the move, each key's source entries
	// before its destination entries, and no scheduled one.
	settle(0)
	if !moveStarted {
		t.Fatal("the example never runs the move")
	}
	got := delivered.list()
	pos := map[string]int{}
	for i, id := range got {
		if _, dup := pos[id]; !dup {
			pos[id] = i
		}
	}
	lastSource := map[string]int{} // key -> position of its last source delivery
	for i, id := range sourceIDs {
		p, ok := pos[id]
		scheduled := i%40 >= 30 // the doc's 30 due and 10 scheduled
		switch {
		case scheduled && ok:
			t.Errorf("the scheduled entry %s was delivered", id)
		case !scheduled && !ok:
			t.Errorf("the source's entry %s was not delivered", id)
		case ok:
			k := fmt.Sprintf("order-%d", i%10)
			lastSource[k] = max(lastSource[k], p)
		}
	}
	for i, id := range destIDs {
		p, ok := pos[id]
		if !ok {
			t.Errorf("the destination's entry %s was not delivered after the move", id)
			continue
		}
		if k := fmt.Sprintf("order-%d", i%10); p < lastSource[k] {
			t.Errorf("the destination's entry %s of %s was delivered before a source entry of its key", id, k)
		}
	}
	if testing.Verbose() {
		t.Logf("delivered in order: %v", got)
	}
}

// renameOutboxes gives the example's outboxes the test's names.
func renameOutboxes(args []string, schema, prefix string) []string {
	out := append([]string(nil), args...)
	for i := 1; i < len(out); i++ {
		switch out[i-1] {
		case "--schema", "--from-schema", "--to-schema":
			if out[i] == docSchema {
				out[i] = schema
			}
		case "--prefix", "--from-prefix", "--to-prefix":
			if out[i] == docPrefix {
				out[i] = prefix
			}
		}
	}
	return out
}

func hasAny(args []string, flags ...string) bool {
	for _, a := range args {
		for _, f := range flags {
			if a == f {
				return true
			}
		}
	}
	return false
}

// startExampleRelay starts, in process, the relay `outbox relay` would
// run on the outbox its flags name, publishing to delivered.
func startExampleRelay(t *testing.T, ctx context.Context, args []string, delivered *deliveries) *exampleRelay {
	t.Helper()
	var f cli.StoreFlags
	for i := 1; i < len(args); i++ {
		switch args[i-1] {
		case "--store":
			f.Store = args[i]
		case "--schema":
			f.Schema = args[i]
		case "--table":
			f.Table = args[i]
		case "--prefix":
			f.Prefix = args[i]
		}
	}
	opened, err := f.Open(ctx, cli.OpenOptions{Notify: true})
	if err != nil {
		t.Fatalf("opening the relay's outbox: %v", err)
	}
	sink := outbox.SinkFunc(func(_ context.Context, e outbox.Entry) error {
		delivered.add(e.ID)
		return nil
	})
	relay, err := outbox.NewRelay(opened.Store, sink, outbox.RelayOptions{
		PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), StatsInterval: -1,
	})
	if err != nil {
		opened.Close()
		t.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		opened.Close()
		t.Fatal(err)
	}
	return &exampleRelay{opened: opened, relay: relay}
}
