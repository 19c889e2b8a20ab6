package app

// TestReadmeExamples runs the examples of README.md, so they cannot drift
// from the commands, their flags and the error texts the stores keep.
//
//   - Every ```sh block is run line by line, unless the line before it (blank
//     lines aside) is "<!-- readme-test: not run: REASON -->", which must
//     give the reason. A "#" after a blank starts a comment.
//   - `go run ./cmd/outbox ARGS` and `outbox ARGS` run the CLI in process
//     and must exit 0; any other line fails the test (mark its block).
//   - `export OUTBOX_STORE=URL` names the store of the commands after it:
//     the test's PostgreSQL (or Redis, by the URL's scheme) stands in for
//     URL, passed as --store (which overrides the variable) because the
//     tests of the package run in parallel in one process; the outbox name
//     billing (--schema) becomes a schema of the test's own.
//   - After `outbox migrate up`, the test appends, as the service of the
//     README's Go example would, one entry to the topic orders, which the
//     test's Kafka (kfake) does not have, and one to a topic it has.
//   - `outbox relay` runs in the background until the block ends, against
//     that Kafka (its --sink-url kafka://... or --kafka-brokers) with its
//     metrics on a free port (its
//     --metrics-addr), and --kafka-unknown-topic-timeout 2s added so the
//     entry for orders parks with the Kafka sink's real unknown-topic error
//     within seconds instead of the default minute; the test waits until
//     the other entry is sent and that one parked.
//   - `outbox ui` is served on a free port (--addr 127.0.0.1:0 added; the
//     default 8080 may be taken), fetched once, and stopped.
//   - An argument ending in "…" (an ID cut short) is the parked entry's ID.
//   - A command whose comment gives its Redis form, "(Redis: --prefix
//     '{billing}')", is also run on the test's Redis with that flag instead
//     of --schema billing (and a prefix of the test's own).
//
// Commands whose effect the README states are checked: parked lists the
// parked entry, show prints its full error, requeue --error FILTER
// --dry-run matches it (FILTER is part of the stored error) and changes
// nothing, cancel --all --yes leaves nothing pending or parked, migrate sql
// prints the schema's SQL. The ```go block is compiled (see
// TestReadmeGoExampleCompiles).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

const (
	readmeFile = "../../../../README.md"
	// readmeNotRun marks a block the test does not run, with the reason.
	readmeNotRun = "<!-- readme-test: not run:"
	// readmeKnownTopic is the topic the test's Kafka has.
	readmeKnownTopic = "audit"
)

// readmeBlock is a fenced block of README.md.
type readmeBlock struct {
	line   int    // of the opening fence, 1-based
	lang   string // after the fence: sh, go, ...
	notRun string // the reason given by a readmeNotRun marker
	lines  []readmeLine
}

// readmeLine is a line of a block, without its comment.
type readmeLine struct {
	line    int
	text    string
	comment string // after the "#", trimmed
}

// readmeBlocks returns the fenced blocks of the README.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []readmeBlock
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		b := readmeBlock{line: i + 1, lang: strings.TrimPrefix(fence, "```")}
		for j := i - 1; j >= 0; j-- {
			prev := strings.TrimSpace(lines[j])
			if prev == "" {
				continue
			}
			if reason, ok := strings.CutPrefix(prev, readmeNotRun); ok {
				b.notRun = strings.TrimSpace(strings.TrimSuffix(reason, "-->"))
				if b.notRun == "" {
					t.Errorf("%s:%d: the marker gives no reason", readmeFile, j+1)
				}
			}
			break
		}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			text, comment := lines[i], ""
			if b.lang != "go" {
				code := stripShellComment(text)
				comment = strings.TrimSpace(strings.TrimPrefix(text[len(code):], "#"))
				text = strings.TrimSpace(code)
			}
			if text != "" {
				b.lines = append(b.lines, readmeLine{line: i + 1, text: text, comment: comment})
			}
		}
		if i >= len(lines) {
			t.Fatalf("%s:%d: the block is not closed", readmeFile, b.line)
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// stripShellComment removes a comment: a "#" at the start or after a blank,
// outside quotes.
func stripShellComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

func TestReadmeParsing(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`outbox status --schema billing   # per partition`: `outbox status --schema billing   `,
		`outbox migrate up --prefix '{a#b}' # Redis`:       `outbox migrate up --prefix '{a#b}' `,
		`outbox requeue --error "x # y" --dry-run`:         `outbox requeue --error "x # y" --dry-run`,
		`# a comment`:               ``,
		`outbox show 0193…`:         `outbox show 0193…`,
		`outbox parked --topic a#b`: `outbox parked --topic a#b`,
		`export OUTBOX_STORE=postgres://app@db/app#fragment`: `export OUTBOX_STORE=postgres://app@db/app#fragment`,
	} {
		if got := stripShellComment(in); got != want {
			t.Errorf("stripShellComment(%q) = %q, want %q", in, got, want)
		}
	}
	blocks := readmeBlocks(t)
	var sh, goBlocks int
	for _, b := range blocks {
		switch b.lang {
		case "sh":
			sh++
		case "go":
			goBlocks++
		}
	}
	if sh < 2 || goBlocks != 1 {
		t.Errorf("%s has %d sh blocks and %d go blocks; the test expects the demo and operating blocks and one Go example", readmeFile, sh, goBlocks)
	}
}

func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	ran := 0
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" && b.lang != "console" && b.lang != "bash" {
			continue
		}
		if b.notRun != "" {
			t.Logf("%s:%d: not run: %s", readmeFile, b.line, b.notRun)
			continue
		}
		ran++
		t.Run(fmt.Sprintf("line%d", b.line), func(t *testing.T) {
			t.Parallel()
			runReadmeBlock(t, b)
		})
	}
	if ran == 0 {
		t.Fatalf("%s: no shell block was run", readmeFile)
	}
}

// readmeRun is the state of one block's run.
type readmeRun struct {
	t      *testing.T
	ctx    context.Context
	store  string // the test's store URL, once exported
	pool   *pgxpool.Pool
	schema string
	kafka  *kfake.Cluster
	b      *pgoutbox.Backend
	parked outbox.Entry // the entry of the unknown topic, once parked
	relay  *cliRun
}

func runReadmeBlock(t *testing.T, b readmeBlock) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := &readmeRun{t: t, ctx: ctx}
	for _, l := range b.lines {
		where := fmt.Sprintf("%s:%d: %s", readmeFile, l.line, l.text)
		words, err := shellWords(l.text, map[string]string{})
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/outbox" {
			words = append([]string{"outbox"}, words[3:]...)
		}
		switch {
		case len(words) == 2 && words[0] == "export":
			r.export(where, words[1])
		case len(words) >= 2 && words[0] == "outbox":
			r.command(where, slices.Clone(words[1:]))
			if m := redisVariant.FindStringSubmatch(l.comment); m != nil {
				r.onRedis(where+" # "+m[0], words[1:], m[1])
			}
		default:
			t.Fatalf("%s: the test does not know how to run this; mark the block with %s REASON -->", where, readmeNotRun)
		}
		if t.Failed() {
			return
		}
	}
	if r.relay != nil {
		if code := r.relay.finish(t); code != 0 {
			t.Errorf("outbox relay exited %d\n%s", code, r.relay.errs)
		}
	}
}

// redisVariant is a comment giving the Redis form of a command's outbox
// name: "(Redis: --prefix '{billing}')".
var redisVariant = regexp.MustCompile(`\(Redis: --prefix '([^']+)'\)`)

// onRedis runs the Redis form of a command: its --schema billing replaced
// by --prefix with a prefix of the test's own standing for the README's,
// on the test's Redis. It must exit 0.
func (r *readmeRun) onRedis(where string, args []string, docPrefix string) {
	t := r.t
	if docPrefix != "{"+docSchema+"}" {
		t.Fatalf("%s: the test knows the prefix {%s} only", where, docSchema)
	}
	url, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	out := []string{}
	for i := 0; i < len(args); i++ {
		if args[i] == "--schema" && i+1 < len(args) && args[i+1] == docSchema {
			out = append(out, "--prefix", prefix)
			i++
			continue
		}
		out = append(out, args[i])
	}
	if !slices.Contains(out, "--prefix") {
		t.Fatalf("%s: the command names no --schema %s to replace", where, docSchema)
	}
	if res := runCLI(t, append(out, "--store", url)...); res.code != 0 {
		t.Fatalf("%s: on Redis, want exit 0, got %v", where, res)
	}
	if len(out) > 1 && out[0] == "migrate" && out[1] == "up" {
		keys, err := client.Keys(r.ctx, "*"+strings.Trim(prefix, "{}")+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			t.Errorf("%s: on Redis, migrate up created no key under %s", where, prefix)
		}
	}
}

// export handles `export NAME=VALUE`.
func (r *readmeRun) export(where, assignment string) {
	t := r.t
	name, value, _ := strings.Cut(assignment, "=")
	if name != "OUTBOX_STORE" {
		t.Fatalf("%s: the test knows no value for %s", where, name)
	}
	if !strings.HasPrefix(value, "postgres://") {
		t.Fatalf("%s: the test runs the commands on PostgreSQL only; give a postgres:// URL", where)
	}
	r.store, r.pool = cliPostgres(t)
	r.schema = cliSchema(t, r.pool)
}

// command runs `outbox args...`.
func (r *readmeRun) command(where string, args []string) {
	t := r.t
	if r.store != "" && args[0] != "demo" {
		args = append(renameOutboxes(args, r.schema, ""), "--store", r.store)
	}
	for i, a := range args {
		if strings.HasSuffix(a, "…") {
			if r.parked.ID == "" {
				t.Fatalf("%s: %s stands for the parked entry's ID, but none is parked yet", where, a)
			}
			args[i] = r.parked.ID
		}
	}
	switch args[0] {
	case "relay":
		r.startRelay(where, args)
		return
	case "ui":
		r.ui(where, args)
		return
	}
	res := runCLI(t, args...)
	if res.code != 0 {
		t.Fatalf("%s: want exit 0, got %v", where, res)
	}
	r.check(where, args, res)
}

// check verifies what the README says a command does.
func (r *readmeRun) check(where string, args []string, res cliResult) {
	t := r.t
	sub := args[0]
	if sub == "migrate" && len(args) > 1 {
		sub += " " + args[1]
	}
	switch sub {
	case "migrate up":
		r.appendEntries(where)
	case "migrate sql":
		if !strings.Contains(res.stdout, "CREATE TABLE") {
			t.Errorf("%s: prints no CREATE TABLE:\n%v", where, res)
		}
	case "parked":
		if !strings.Contains(res.stdout, r.parked.ID) {
			t.Errorf("%s: does not list the parked entry %s:\n%v", where, r.parked.ID, res)
		}
	case "show":
		if !strings.Contains(res.stdout, r.parked.ID) || !strings.Contains(res.stdout, r.parked.LastError) {
			t.Errorf("%s: does not show the entry %s with its full last error %q:\n%v", where, r.parked.ID, r.parked.LastError, res)
		}
	case "requeue":
		filter := flagValue(args, "--error")
		if filter != "" && !strings.Contains(r.parked.LastError, filter) {
			t.Errorf("%s: the filter %q is not part of the error the Kafka sink stores for an unknown topic: %q", where, filter, r.parked.LastError)
		}
		if !strings.Contains(res.stdout+res.stderr, r.parked.ID) {
			t.Errorf("%s: does not match the parked entry %s:\n%v", where, r.parked.ID, res)
		}
		if slices.Contains(args, "--dry-run") {
			if st := r.stats(); st.Parked != 1 {
				t.Errorf("%s: a dry run changed the outbox: %d parked, want 1", where, st.Parked)
			}
		}
	case "cancel":
		if slices.Contains(args, "--all") {
			if st := r.stats(); st.Parked != 0 || st.Pending != 0 {
				t.Errorf("%s: %d pending and %d parked left, want none:\n%v", where, st.Pending, st.Parked, res)
			}
		}
	}
}

// flagValue returns the value of flag in args ("" when absent).
func flagValue(args []string, flag string) string {
	for i := 1; i < len(args); i++ {
		if args[i-1] == flag {
			return args[i]
		}
		if v, ok := strings.CutPrefix(args[i], flag+"="); ok {
			return v
		}
	}
	return ""
}

// appendEntries appends, as a service would, an entry to a topic the
// test's Kafka lacks (orders, the README's) and one to a topic it has.
func (r *readmeRun) appendEntries(where string) {
	t := r.t
	if r.store == "" {
		t.Fatalf("%s: no store named yet", where)
	}
	b, err := pgoutbox.New(r.ctx, r.pool, pgoutbox.Options{Schema: r.schema})
	if err != nil {
		t.Fatalf("%s: opening the outbox it created: %v", where, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	r.b = b
	err = pgx.BeginFunc(r.ctx, r.pool, func(tx pgx.Tx) error {
		return b.AppendInTx(r.ctx, tx,
			outbox.Entry{Topic: "orders", Key: "order-1", Payload: []byte(`{"status":"paid"}`)},
			outbox.Entry{Topic: readmeKnownTopic, Key: "order-1", Payload: []byte(`{"seen":true}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (r *readmeRun) stats() outbox.Stats {
	r.t.Helper()
	st, err := r.b.Stats(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// startRelay starts `outbox relay` on the test's Kafka and waits until it
// sent the entry of the known topic and parked the other.
func (r *readmeRun) startRelay(where string, args []string) {
	t := r.t
	if r.b == nil {
		t.Fatalf("%s: the relay runs before any outbox was created", where)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(1, readmeKnownTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for i := 1; i < len(args); i++ {
		switch args[i-1] {
		case "--kafka-brokers":
			args[i] = strings.Join(cluster.ListenAddrs(), ",")
		case "--sink-url":
			if !strings.HasPrefix(args[i], "kafka://") {
				t.Fatalf("%s: the test runs the relay on Kafka; give its --sink-url as kafka://HOST:PORT,... (or mark the block)", where)
			}
			args[i] = "kafka://" + strings.Join(cluster.ListenAddrs(), ",")
		case "--metrics-addr":
			args[i] = metrics
		}
	}
	if flagValue(args, "--kafka-brokers")+flagValue(args, "--sink-url") == "" || flagValue(args, "--metrics-addr") != metrics {
		t.Fatalf("%s: the test expects --sink-url kafka://... (or --kafka-brokers) and --metrics-addr", where)
	}
	args = append(args, "--kafka-unknown-topic-timeout", "2s")
	r.relay = startCLI(t, args...)
	r.relay.waitFor(t, regexp.MustCompile(`(outbox relay: running)`))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) { // a watchdog
		if st := r.stats(); st.Parked == 1 && st.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after a minute, %+v; want the entry of %s sent and the one of orders parked\n%s", where, r.stats(), readmeKnownTopic, r.relay.errs)
		}
	}
	parked, err := r.b.Parked(r.ctx, "", 10)
	if err != nil || len(parked) != 1 || parked[0].Topic != "orders" {
		t.Fatalf("%s: parked %+v, %v; want the entry of orders", where, parked, err)
	}
	r.parked = parked[0]
	if code, body := httpGet(t, "http://"+metrics+"/metrics"); code != http.StatusOK || !strings.Contains(body, "outbox_") {
		t.Errorf("%s: /metrics answered %d:\n%.500s", where, code, body)
	}
}

// ui serves the dashboard on a free port, fetches its page and stops it.
func (r *readmeRun) ui(where string, args []string) {
	t := r.t
	run := startCLI(t, append(args, "--addr", "127.0.0.1:0")...)
	u := run.waitFor(t, regexp.MustCompile(`outbox ui: serving (http://\S+)`))
	if code, body := httpGet(t, u); code != http.StatusOK {
		t.Errorf("%s: %s answered %d:\n%.500s", where, u, code, body)
	}
	if code := run.finish(t); code != 0 {
		t.Errorf("%s: exited %d\n%s%s", where, code, run.out, run.errs)
	}
}

// TestReadmeGoExampleCompiles compiles the README's ```go block: its
// imports at the top of a file of this package, the rest as the body of a
// function whose parameters are the names it uses but does not declare
// (ctx, pool, orderID, payload). The file is added through go build
// -overlay, so nothing is written to the source tree.
func TestReadmeGoExampleCompiles(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	var code *readmeBlock
	for _, b := range readmeBlocks(t) {
		if b.lang == "go" {
			code = &b
		}
	}
	if code == nil {
		t.Fatalf("%s has no ```go block", readmeFile)
	}
	var imports, body []string
	inImports := false
	for _, l := range code.lines {
		s := strings.TrimSpace(l.text)
		switch {
		case s == "import (":
			inImports = true
		case inImports && s == ")":
			inImports = false
		case inImports:
			imports = append(imports, s)
		case strings.HasPrefix(s, "import "):
			imports = append(imports, strings.TrimPrefix(s, "import "))
		default:
			body = append(body, l.text)
		}
	}
	for _, need := range []string{`"context"`, `"github.com/jackc/pgx/v5/pgxpool"`} {
		if !slices.ContainsFunc(imports, func(s string) bool { return strings.HasSuffix(s, need) }) {
			imports = append(imports, need)
		}
	}
	src := fmt.Sprintf("package app\n\nimport (\n%s\n)\n\n// readmeGoExample is README.md's Go example (line %d).\nfunc readmeGoExample(ctx context.Context, pool *pgxpool.Pool, orderID string, payload []byte) {\n%s\n_ = err\n}\n",
		strings.Join(imports, "\n"), code.line, strings.Join(body, "\n"))
	dir := t.TempDir()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	gen := filepath.Join(dir, "readme_example.go")
	if err := os.WriteFile(gen, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(here, "zz_readme_example.go"): gen}})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "build", "-overlay", overlayFile, "-o", os.DevNull, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s:%d: the Go example does not compile: %v\n%s\n--- as compiled\n%s", readmeFile, code.line, err, out, src)
	}
}
