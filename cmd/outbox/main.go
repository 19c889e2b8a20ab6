// Command outbox runs relays, migrates and administers outboxes, and runs
// a self-checking demo.
//
//	outbox relay   --store URL --kafka-brokers HOSTS [--metrics-addr :9464]
//	outbox migrate up|down|status|sql --store URL [--partitions N]
//	outbox status|parked|show|requeue|cancel|purge --store URL [flags] [IDs]
//	outbox ui      --store URL [--addr 127.0.0.1:8080] [--read-only] [--token TOKEN]
//	outbox demo [flags] [--ui]
//	outbox version | help [COMMAND | stores | config]
//
// The store is named by --store URL, the OUTBOX_STORE variable or store:
// in a YAML file given by --config (flags override the environment, which
// overrides the file); 'outbox help stores' lists the URL forms and
// 'outbox help config' the file.
//
// The demo needs nothing but Go: it appends entries in transactions to the
// in-memory backend, runs relays that publish to an in-process Kafka
// (franz-go's kfake) through the Kafka sink while failures are injected,
// consumes the topic back and checks that every committed entry arrived
// (or was parked), in per-key order, and that nothing from a rolled-back
// transaction did. It exits 1 if any entry was lost or reordered.
//
// Exit status: 0 success, 1 failure, 2 usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/alecthomas/kong"
	"github.com/redis/go-redis/v9"
	"golang.org/x/term"
)

// version is set at build time (-ldflags "-X main.version=v1.2.3"); a build
// from a module uses the module version.
var version = ""

// App is what every command's Run gets: where to write, and the build.
type App struct {
	Stdout, Stderr io.Writer
	Version        string
	// Stdin is where confirmations are read from.
	Stdin io.Reader
	// StdinTerminal, StdoutTerminal and StderrTerminal report whether
	// each is a terminal: a confirmation is asked only on one, a progress
	// bar is drawn only on one.
	StdinTerminal, StdoutTerminal, StderrTerminal bool

	secrets *secretSet
	// stop, when set, ends the commands that run until a signal (ui, the
	// demo's --ui wait) as SIGINT would; tests set it.
	stop <-chan struct{}
}

// CLI is the command line. Command structs live next to their code.
type CLI struct {
	Config string `name:"config" env:"OUTBOX_CONFIG" placeholder:"FILE" noconfig:"" help:"YAML file of settings whose keys are flag names (store:, schema:, prefix:, ...); flags and the environment override it ('outbox help config')."`

	Relay   RelayCmd   `cmd:"" help:"Relay an outbox to Kafka until SIGTERM or SIGINT, serving /metrics, /healthz and /readyz."`
	Migrate MigrateCmd `cmd:"" help:"Create, upgrade or remove an outbox's tables (Postgres), or store its partition count (Redis)."`
	Move    MoveCmd    `cmd:"" help:"Move a live outbox to another store, backend or partition count: --prepare, then the move; --dry-run, --verify, --release, --unseal."`
	Status  StatusCmd  `cmd:"" help:"Counts of an outbox per partition: pending, due, parked, lag, lease holder."`
	Parked  ParkedCmd  `cmd:"" help:"List parked (dead-letter) entries, with filters, a page at a time."`
	Show    ShowCmd    `cmd:"" help:"Show one entry: payload, headers, attempts, times, the full last error."`
	Requeue RequeueCmd `cmd:"" help:"Move parked entries back to pending: by ID, by filter or all."`
	Cancel  CancelCmd  `cmd:"" help:"Delete entries: pending or parked ones by ID, parked ones by filter or all."`
	Purge   PurgeCmd   `cmd:"" help:"Delete archived (sent) entries older than a time from the Postgres archive."`
	UI      UICmd      `cmd:"" name:"ui" help:"Serve the dashboard of an outbox (counts, charts, partitions, parked entries, requeue and cancel) on 127.0.0.1:8080 until SIGTERM or SIGINT."`
	Demo    DemoCmd    `cmd:"" help:"Append, relay to an in-process Kafka with injected failures, and verify: nothing to install."`
	Version VersionCmd `cmd:"" help:"Print the version."`
}

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(app *App) error {
	_, err := fmt.Fprintln(app.Stdout, "outbox", app.Version)
	return err
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// quietLogger drops go-redis's internal log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// exitError carries an exit status other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks an error as a usage error (exit status 2).
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// helpTopics are the texts 'outbox help TOPIC' prints.
var helpTopics = map[string]string{
	"stores": storesHelp,
	"config": configHelp,
	"json":   jsonHelp,
}

// run parses args and runs the command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	app := &App{
		Stdout: stdout, Stderr: stderr, Stdin: os.Stdin, Version: buildVersion(),
		StdinTerminal:  term.IsTerminal(int(os.Stdin.Fd())),
		StdoutTerminal: isTerminal(stdout),
		StderrTerminal: isTerminal(stderr),
	}
	return runApp(args, app)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// quietRedis silences go-redis's own log (once per process): it logs
// failed dials and pool trouble, and the CLI reports every error itself,
// explained.
var quietRedis sync.Once

// runApp is run with the terminal and input given (tests give their own).
func runApp(args []string, app *App) int {
	quietRedis.Do(func() { redis.SetLogger(quietLogger{}) })
	secrets := &secretSet{}
	secrets.addArgs(args)
	app.secrets = secrets
	app.Stdout = &redactWriter{w: app.Stdout, secrets: secrets}
	app.Stderr = &redactWriter{w: app.Stderr, secrets: secrets}
	if app.Stdin == nil {
		app.Stdin = strings.NewReader("")
	}
	stdout, stderr := app.Stdout, app.Stderr

	if len(args) == 2 && args[0] == "help" {
		if text, ok := helpTopics[args[1]]; ok {
			fmt.Fprint(stdout, text)
			return 0
		}
	}
	var cli CLI
	exit := -1
	config := &configResolver{secrets: secrets}
	parser, err := kong.New(&cli,
		kong.Name("outbox"),
		kong.Description("Run relays, migrate and administer transactional outboxes (Postgres, Redis) and relay them to Kafka.\n\n"+
			"Name the outbox with --store URL (or OUTBOX_STORE, or store: in the --config file) and --schema/--table (Postgres) or --prefix (Redis).\n\n"+
			"More help: 'outbox help stores' (URL forms: auth, TLS, Sentinel, Cluster), 'outbox help config' (the config file), 'outbox help json' (the -o json shapes), 'outbox COMMAND --help'.\n\n"+
			"Exit status: 0 success, 1 failure, 2 usage error."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exit = code }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Resolvers(config),
		kong.Bind(app),
	)
	if err != nil {
		fmt.Fprintln(stderr, "outbox:", err)
		return 1
	}
	if len(args) == 0 {
		args = []string{"--help"}
	}
	if args[0] == "help" {
		args = append(args[1:], "--help")
	}
	kctx, err := parser.Parse(args)
	if exit >= 0 {
		return exit
	}
	if err != nil {
		var ce *configError
		if errors.As(err, &ce) {
			fmt.Fprintln(stderr, "outbox:", secrets.text(ce.Error()))
			return 2
		}
		msg := err.Error()
		var pe *kong.ParseError
		if errors.As(err, &pe) && pe.Context != nil {
			if cmd := commandPath(pe.Context); cmd != "" {
				msg += fmt.Sprintf(" ('outbox %s --help' shows the usage)", cmd)
			} else {
				msg += " ('outbox --help' lists the commands)"
			}
		}
		fmt.Fprintln(stderr, "outbox:", secrets.text(msg))
		return 2
	}
	secrets.addFlags(kctx)
	if err := kctx.Run(); err != nil {
		msg := err.Error()
		if errors.Is(err, context.DeadlineExceeded) && !strings.Contains(msg, "--timeout") {
			msg += " (the command ran out of time: raise --timeout)"
		}
		fmt.Fprintln(stderr, "outbox:", secrets.text(msg))
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

// commandPath is the selected command's words ("migrate sql").
func commandPath(kctx *kong.Context) string {
	var words []string
	for _, w := range strings.Fields(kctx.Command()) {
		if !strings.HasPrefix(w, "<") {
			words = append(words, w)
		}
	}
	return strings.Join(words, " ")
}

// buildVersion is the version linked in, else the module's.
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
