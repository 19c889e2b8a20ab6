// Package app is the outbox command: the kong root that wires the command
// families together (relaycmd, admincmd, movecmd, uicmd, demo), the help
// topics, and Main, which runs one command line and returns its exit
// status.
package app

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

	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/demo"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/movecmd"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/relaycmd"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/uicmd"
)

// CLI is the command line. Command structs live next to their code.
type CLI struct {
	Config string `name:"config" env:"OUTBOX_CONFIG" placeholder:"FILE" noconfig:"" help:"YAML file of settings whose keys are flag names (store:, schema:, prefix:, ...); flags and the environment override it ('outbox help config')."`

	Relay   relaycmd.RelayCmd   `cmd:"" help:"Relay an outbox to Kafka, NATS JetStream or RabbitMQ (--sink-url) until SIGTERM or SIGINT, serving /metrics, /healthz and /readyz."`
	Migrate admincmd.MigrateCmd `cmd:"" help:"Create, upgrade or remove an outbox's tables (Postgres), or store its partition count (Redis)."`
	Move    movecmd.MoveCmd     `cmd:"" help:"Move a live outbox to another store, backend or partition count: --prepare, then the move; --dry-run, --verify, --release, --unseal."`
	Status  admincmd.StatusCmd  `cmd:"" help:"Counts of an outbox per partition: pending, due, parked, lag, oldest due entry, blocked keys, lease holder; what is paused; the store's health (table sizes and dead rows, or Redis memory) with a WARNING line for each condition that keeps it from cleaning up; the archive's oldest entry."`
	Entries admincmd.EntriesCmd `cmd:"" help:"List the entries of one state (due, scheduled, retrying, parked), with filters, a page at a time."`
	Blocked admincmd.BlockedCmd `cmd:"" help:"List the keys held back by their head entry (failing, deferred or paused), the longest blocked first, with how many entries wait behind each."`
	Parked  admincmd.ParkedCmd  `cmd:"" help:"List parked (dead-letter) entries, with filters, a page at a time."`
	Show    admincmd.ShowCmd    `cmd:"" help:"Show one entry: payload, headers, attempts and their errors, times, the full last error."`
	Pause   admincmd.PauseCmd   `cmd:"" help:"Stop delivery of a topic (--topic) or a partition (--partition) by every relay of the outbox; its entries stay pending."`
	Resume  admincmd.ResumeCmd  `cmd:"" help:"Restart delivery of a paused topic (--topic) or partition (--partition)."`
	Relays  admincmd.RelaysCmd  `cmd:"" help:"The fleet: each relay (owner, host, version, start, last heartbeat, partitions held), and partitions no relay holds while entries are pending."`
	Requeue admincmd.RequeueCmd `cmd:"" help:"Move parked entries back to pending: by ID, by filter or all."`
	Cancel  admincmd.CancelCmd  `cmd:"" help:"Delete entries: pending or parked ones by ID, parked ones by filter or all."`
	Purge   admincmd.PurgeCmd   `cmd:"" help:"Delete archived (sent) entries older than a time from the Postgres or MySQL archive ('outbox relay --archive-retention' does it by itself)."`
	UI      uicmd.UICmd         `cmd:"" name:"ui" help:"Serve the dashboard of an outbox (counts, charts, partitions, parked entries, requeue and cancel) on 127.0.0.1:8080 until SIGTERM or SIGINT."`
	Demo    demo.DemoCmd        `cmd:"" help:"Append, relay to an in-process Kafka (or --sink nats: an embedded NATS server) with injected failures, and verify: nothing to install."`
	Version VersionCmd          `cmd:"" help:"Print the version."`
}

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(app *cli.App) error {
	_, err := fmt.Fprintln(app.Stdout, "outbox", app.Version)
	return err
}

// quietLogger drops go-redis's internal log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// helpTopics are the texts 'outbox help TOPIC' prints.
var helpTopics = map[string]string{
	"stores": cli.StoresHelp,
	"config": cli.ConfigHelp,
	"json":   cli.JSONHelp,
}

// Main parses args and runs the command, reading confirmations from the
// process's standard input; linked is the version the binary was linked
// with ("" for none). It returns the exit status.
func Main(args []string, stdout, stderr io.Writer, linked string) int {
	app := &cli.App{
		Stdout: stdout, Stderr: stderr, Stdin: os.Stdin, Version: buildVersion(linked),
		StdinTerminal:  term.IsTerminal(int(os.Stdin.Fd())),
		StdoutTerminal: isTerminal(stdout),
		StderrTerminal: isTerminal(stderr),
	}
	return Run(args, app)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// quietRedis silences go-redis's own log (once per process): it logs
// failed dials and pool trouble, and the CLI reports every error itself,
// explained.
var quietRedis sync.Once

// Run is Main with the terminals and input app gives (tests give their
// own); it returns the exit status.
func Run(args []string, app *cli.App) int {
	quietRedis.Do(func() { redis.SetLogger(quietLogger{}) })
	secrets := &cli.SecretSet{}
	secrets.AddArgs(args)
	app.Secrets = secrets
	app.Stdout = cli.NewRedactWriter(app.Stdout, secrets)
	app.Stderr = cli.NewRedactWriter(app.Stderr, secrets)
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
	var root CLI
	exit := -1
	config := cli.NewConfigResolver(secrets)
	parser, err := kong.New(&root,
		kong.Name("outbox"),
		kong.Description("Run relays, migrate and administer transactional outboxes (Postgres, Redis) and relay them to Kafka, NATS JetStream or RabbitMQ.\n\n"+
			"Name the outbox with --store URL (or OUTBOX_STORE, or store: in the --config file) and --schema/--table (Postgres) or --prefix (Redis).\n\n"+
			"More help: 'outbox help stores' (URL forms: auth, TLS, Sentinel, Cluster), 'outbox help config' (the config file), 'outbox help json' (the -o json shapes), 'outbox COMMAND --help'.\n\n"+
			"Exit status: 0 success, 1 failure, 2 usage error."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exit = code }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Resolvers(config),
		kong.Bind(app),
		cli.DefaultVars(),
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
		var ce *cli.ConfigError
		if errors.As(err, &ce) {
			fmt.Fprintln(stderr, "outbox:", secrets.Text(ce.Error()))
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
		fmt.Fprintln(stderr, "outbox:", secrets.Text(msg))
		return 2
	}
	secrets.AddFlags(kctx)
	if err := kctx.Run(); err != nil {
		msg := err.Error()
		if errors.Is(err, context.DeadlineExceeded) && !strings.Contains(msg, "--timeout") {
			msg += " (the command ran out of time: raise --timeout)"
		}
		fmt.Fprintln(stderr, "outbox:", secrets.Text(msg))
		var ee *cli.ExitError
		if errors.As(err, &ee) {
			return ee.Code
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
func buildVersion(linked string) string {
	if linked != "" {
		return linked
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
