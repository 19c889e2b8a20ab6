package movecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/outboxrelay/outbox/move"
)

// MoveCmd moves a live outbox to another one (package move has the
// protocol).
type MoveCmd struct {
	From       string `name:"from" noconfig:"" env:"OUTBOX_MOVE_FROM" placeholder:"URL" help:"The store of the outbox to move from (the source), as --store takes it ('outbox help stores')."`
	FromSchema string `name:"from-schema" noconfig:"" placeholder:"NAME" help:"Postgres schema of the source outbox (default: public)."`
	FromTable  string `name:"from-table" noconfig:"" placeholder:"NAME" help:"Postgres or MySQL table of the source outbox (default: outbox)."`
	FromPrefix string `name:"from-prefix" noconfig:"" placeholder:"PREFIX" help:"Redis key prefix of the source outbox (default: {outbox})."`
	To         string `name:"to" noconfig:"" env:"OUTBOX_MOVE_TO" placeholder:"URL" help:"The store of the outbox to move to (the destination), created beforehand with 'outbox migrate up'."`
	ToSchema   string `name:"to-schema" noconfig:"" placeholder:"NAME" help:"Postgres schema of the destination outbox (default: public)."`
	ToTable    string `name:"to-table" noconfig:"" placeholder:"NAME" help:"Postgres or MySQL table of the destination outbox (default: outbox)."`
	ToPrefix   string `name:"to-prefix" noconfig:"" placeholder:"PREFIX" help:"Redis key prefix of the destination outbox (default: {outbox})."`

	DryRun      bool          `name:"dry-run" noconfig:"" help:"Print both sides' counts by state and what the next step would do; change nothing."`
	PrepareStep bool          `name:"prepare" noconfig:"" help:"Step 1: hold the (empty) destination, so its relays deliver nothing until the move is done."`
	Verify      bool          `name:"verify" noconfig:"" help:"Print both sides' counts, the seal and the hold; exit 1 unless the move is complete."`
	ReleaseStep bool          `name:"release" noconfig:"" help:"Roll back before the seal: unhold the destination (its relays deliver)."`
	UnsealStep  bool          `name:"unseal" noconfig:"" help:"Roll back the seal: the source accepts appends again."`
	Yes         bool          `noconfig:"" help:"Go ahead with the move without asking (needed when there is no terminal to ask on)."`
	Batch       int           `default:"500" help:"Entries per export and import."`
	Workers     int           `default:"4" help:"Source partitions moved at once."`
	Owner       string        `default:"outbox-move" help:"Lease owner the move takes the source partitions as; keep the default so a resumed move retakes them at once."`
	LeaseTTL    time.Duration `name:"lease-ttl" default:"${lease_ttl}" help:"Time-to-live of the move's leases on the source partitions."`
	Timeout     time.Duration `default:"0s" noconfig:"" help:"Give up after this long; 0 means 30s for every mode but the move itself, which runs until done or interrupted (and resumes when run again)."`
	cli.OutputFlags
}

// moveSide is one outbox of a move, as named by the flags.
type moveSide struct {
	role, flag string // "source", "from"
	flags      cli.StoreFlags
	target     *cli.StoreTarget
	id         string // identity: store without user info, and the outbox's name
}

// sides checks the flags of both outboxes, before anything connects.
func (c *MoveCmd) sides() (*moveSide, *moveSide, error) {
	from := &moveSide{role: "source", flag: "from", flags: cli.StoreFlags{Store: c.From, Schema: c.FromSchema, Table: c.FromTable, Prefix: c.FromPrefix}}
	to := &moveSide{role: "destination", flag: "to", flags: cli.StoreFlags{Store: c.To, Schema: c.ToSchema, Table: c.ToTable, Prefix: c.ToPrefix}}
	for _, s := range []*moveSide{from, to} {
		if s.flags.Store == "" {
			return nil, nil, cli.UsageError("no %s given: pass --%s URL or set OUTBOX_MOVE_%s ('outbox move --help')", s.role, s.flag, strings.ToUpper(s.flag))
		}
		t, err := cli.ParseStore(s.flags.Store)
		if err != nil {
			return nil, nil, s.wrap(err)
		}
		if err := s.checkNames(t.Kind); err != nil {
			return nil, nil, err
		}
		s.target = t
		s.id = cli.Identity(t, s.flags)
	}
	if from.id == to.id {
		return nil, nil, cli.UsageError("the source and the destination are the same outbox (%s): name another outbox as the destination, with --to-schema/--to-table (Postgres), --to-table (MySQL), --to-prefix (Redis) or another --to store", from.id)
	}
	return from, to, nil
}

// checkNames is cli.StoreFlags.CheckNames with this command's flag names.
func (s *moveSide) checkNames(kind string) error {
	f := s.flags
	switch {
	case kind == "postgres" && f.Prefix != "":
		return cli.UsageError("--%s-prefix names a Redis outbox, but the %s store is PostgreSQL: name it with --%s-schema and --%s-table, or drop --%s-prefix", s.flag, s.role, s.flag, s.flag, s.flag)
	case kind == "mysql" && f.Prefix != "":
		return cli.UsageError("--%s-prefix names a Redis outbox, but the %s store is MySQL: name it with --%s-table, or drop --%s-prefix", s.flag, s.role, s.flag, s.flag)
	case kind == "mysql" && f.Schema != "":
		return cli.UsageError("--%s-schema names a Postgres schema, but the %s store is MySQL, where the database in the URL holds the outbox: put the database in the --%s URL, or drop --%s-schema", s.flag, s.role, s.flag, s.flag)
	case kind == "redis" && (f.Schema != "" || f.Table != ""):
		return cli.UsageError("--%s-schema and --%s-table name a Postgres or MySQL outbox, but the %s store is Redis: name it with --%s-prefix, or drop them", s.flag, s.flag, s.role, s.flag)
	}
	if err := f.CheckNames(kind); err != nil {
		return s.wrap(renameFlags(err, s.flag))
	}
	return nil
}

// renameFlags names the flags of a StoreFlags error as this command has
// them (--prefix is --from-prefix), keeping its exit status.
func renameFlags(err error, side string) error {
	msg := err.Error()
	for _, f := range []string{"prefix", "schema", "table"} {
		msg = strings.ReplaceAll(msg, "--"+f, "--"+side+"-"+f)
	}
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		return &cli.ExitError{Code: ee.Code, Err: &cli.RedactedError{Msg: msg, Err: err}}
	}
	return &cli.RedactedError{Msg: msg, Err: err}
}

// wrap says which side an error is about, keeping its exit status.
func (s *moveSide) wrap(err error) error {
	msg := fmt.Sprintf("the %s (--%s): %v", s.role, s.flag, err)
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		return &cli.ExitError{Code: ee.Code, Err: &cli.RedactedError{Msg: msg, Err: err}}
	}
	return &cli.RedactedError{Msg: msg, Err: err}
}

// mode is the selected mode's flag ("" for the move itself).
func (c *MoveCmd) mode() (string, error) {
	var modes []string
	for _, m := range []struct {
		on   bool
		name string
	}{{c.DryRun, "--dry-run"}, {c.PrepareStep, "--prepare"}, {c.Verify, "--verify"}, {c.ReleaseStep, "--release"}, {c.UnsealStep, "--unseal"}} {
		if m.on {
			modes = append(modes, m.name)
		}
	}
	switch {
	case len(modes) > 1:
		return "", cli.UsageError("%s: give one of --dry-run, --prepare, --verify, --release and --unseal (or none, for the move itself)", strings.Join(modes, " and "))
	case c.JSON() && (len(modes) == 0 || (modes[0] != "--dry-run" && modes[0] != "--verify")):
		return "", cli.UsageError("-o json is for --dry-run and --verify; drop it")
	case c.Batch < 1:
		return "", cli.UsageError("--batch must be at least 1")
	case c.Workers < 1:
		return "", cli.UsageError("--workers must be at least 1")
	case c.LeaseTTL <= 0:
		return "", cli.UsageError("--lease-ttl must be positive")
	case c.Owner == "":
		return "", cli.UsageError("--owner must not be empty (keep the default, %s)", move.DefaultOwner)
	case c.Timeout < 0:
		return "", cli.UsageError("--timeout must not be negative")
	}
	if len(modes) == 0 {
		return "", nil
	}
	return modes[0], nil
}

// Run runs the selected mode.
func (c *MoveCmd) Run(app *cli.App) error {
	mode, err := c.mode()
	if err != nil {
		return err
	}
	fromSide, toSide, err := c.sides()
	if err != nil {
		return err
	}
	ctx := context.Background()
	timeout := c.Timeout
	if timeout == 0 && mode != "" {
		timeout = 30 * time.Second
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if mode == "" {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	from, err := fromSide.flags.Open(ctx, cli.OpenOptions{})
	if err != nil {
		return fromSide.wrap(err)
	}
	defer from.Close()
	to, err := toSide.flags.Open(ctx, cli.OpenOptions{})
	if err != nil {
		return toSide.wrap(err)
	}
	defer to.Close()
	m := &mover{cmd: c, app: app, from: from, to: to, fromSide: fromSide, toSide: toSide,
		opts: move.Options{SourceName: fromSide.id, Owner: c.Owner, LeaseTTL: c.LeaseTTL, Batch: c.Batch, Workers: c.Workers}}
	switch mode {
	case "--dry-run", "--verify":
		return m.report(ctx, mode == "--verify")
	case "--prepare":
		return m.prepare(ctx)
	case "--release":
		return m.release(ctx)
	case "--unseal":
		return m.unseal(ctx)
	}
	return m.run(ctx)
}

// mover runs one mode of outbox move on the two opened outboxes.
type mover struct {
	cmd              *MoveCmd
	app              *cli.App
	from, to         *cli.Opened
	fromSide, toSide *moveSide
	opts             move.Options
}

// fail explains a store error (a connection lost) and removes passwords.
func (m *mover) fail(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return cli.Redact(m.from.Explain(m.to.Explain(err)), m.cmd.From+" "+m.cmd.To)
}

// MoveStatusJSON is the shape of move --dry-run/--verify -o json.
type MoveStatusJSON struct {
	Source      MoveSideJSON  `json:"source"`
	Destination MoveSideJSON  `json:"destination"`
	Sealed      bool          `json:"sealed"`
	Held        *cli.HoldJSON `json:"held"`
	MoveID      *string       `json:"move_id"`
	Complete    bool          `json:"complete"`
	// Next is what the next step is (or would do, for --dry-run).
	Next string `json:"next"`
}

type MoveSideJSON struct {
	Store      string `json:"store"`
	Kind       string `json:"kind"`
	Outbox     string `json:"outbox"`
	Partitions int    `json:"partitions"`
	Due        int64  `json:"due"`
	Waiting    int64  `json:"waiting"`
	Parked     int64  `json:"parked"`
	Total      int64  `json:"total"`
}

func sideJSON(o *cli.Opened, c move.Counts) MoveSideJSON {
	return MoveSideJSON{Store: o.Where, Kind: o.Kind, Outbox: o.Outbox, Partitions: o.Store.Partitions(),
		Due: c.Due, Waiting: c.Waiting, Parked: c.Parked, Total: c.Total()}
}

// next says what the next step of the move is, given its state.
func (m *mover) next(st move.Status) string {
	switch {
	case st.Complete():
		return "nothing: the move is complete (the source is sealed and empty, the destination released)"
	case st.Hold.Held && !st.ThisMove:
		return fmt.Sprintf("none: the destination is held by %q, not by a move from %s", st.Hold.Reason, m.fromSide.id)
	case st.ThisMove && st.Sealed:
		return fmt.Sprintf("outbox move (again: the move was interrupted) would take the source's partitions, move its %d entries and release the destination", st.Source.Total())
	case st.ThisMove:
		return fmt.Sprintf("once every service appends to the destination: outbox move would seal the source, wait for its relays to stop, move its %d entries and release the destination", st.Source.Total())
	case st.Destination.Total() > 0:
		return fmt.Sprintf("none: --prepare would refuse the destination, which is not empty (%s) and not prepared for this move; name another outbox or empty it", st.Destination)
	case st.Sealed:
		return "none: the source is sealed and the destination is not held by a move from it; outbox move --unseal rolls the seal back"
	default:
		return "outbox move --prepare would hold the destination; then deploy its relays, roll the services over to it, and run outbox move"
	}
}

// report prints both sides (--dry-run, --verify); --verify fails unless
// the move is complete.
func (m *mover) report(ctx context.Context, verify bool) error {
	st, err := move.Inspect(ctx, m.from.Store, m.to.Store, m.opts)
	if err != nil {
		return m.fail(err)
	}
	rep := MoveStatusJSON{Source: sideJSON(m.from, st.Source), Destination: sideJSON(m.to, st.Destination),
		Sealed: st.Sealed, Complete: st.Complete(), Next: m.next(st)}
	if st.Hold.Held {
		rep.Held = &cli.HoldJSON{Reason: st.Hold.Reason, Since: st.Hold.Since.UTC()}
	}
	if st.MoveID != "" {
		rep.MoveID = &st.MoveID
	}
	incomplete := func() error {
		if verify && !rep.Complete {
			return &cli.ExitError{Code: 1, Err: errors.New("the move is not complete: " + m.missing(st))}
		}
		return nil
	}
	if m.cmd.JSON() {
		if err := cli.WriteJSON(m.app.Stdout, rep); err != nil {
			return err
		}
		return incomplete()
	}
	out := m.app.Stdout
	sealed := "not sealed"
	if st.Sealed {
		sealed = "sealed"
	}
	held := "not held"
	if st.Hold.Held {
		held = fmt.Sprintf("held: %s since %s", cli.Cell(st.Hold.Reason), st.Hold.Since.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(out, "source:      %s%s, %d partitions: %s; %s\n", m.from.Outbox, m.from.In(), rep.Source.Partitions, st.Source, sealed)
	fmt.Fprintf(out, "destination: %s%s, %d partitions: %s; %s\n", m.to.Outbox, m.to.In(), rep.Destination.Partitions, st.Destination, held)
	if verify {
		if rep.Complete {
			fmt.Fprintln(out, "the move is complete: the source is sealed and empty, the destination released")
		} else {
			fmt.Fprintf(out, "the move is not complete: %s\nnext: %s\n", m.missing(st), rep.Next)
		}
		return incomplete()
	}
	fmt.Fprintf(out, "next: %s\n(dry run: nothing changed)\n", rep.Next)
	return nil
}

// missing says what an incomplete move lacks.
func (m *mover) missing(st move.Status) string {
	var why []string
	if !st.Sealed {
		why = append(why, "the source is not sealed")
	}
	if n := st.Source.Total(); n > 0 {
		why = append(why, fmt.Sprintf("the source still holds %s", st.Source))
	}
	if st.Hold.Held {
		why = append(why, "the destination is still held")
	}
	return strings.Join(why, ", ")
}

func (m *mover) prepare(ctx context.Context) error {
	id, err := move.Prepare(ctx, m.from.Store, m.to.Store, m.opts)
	if err != nil {
		return m.fail(err)
	}
	out := m.app.Stdout
	fmt.Fprintf(out, "the destination %s%s is held for move %s from %s: its relays deliver nothing until the move is done\n", m.to.Outbox, m.to.In(), id, m.fromSide.id)
	fmt.Fprintf(out, "next: deploy the destination's relays, roll the services over to append to it, then run outbox move with the same --from and --to (outbox move --release rolls this back)\n")
	return nil
}

func (m *mover) release(ctx context.Context) error {
	st, err := move.Inspect(ctx, m.from.Store, m.to.Store, m.opts)
	if err != nil {
		return m.fail(err)
	}
	if err := move.Release(ctx, m.from.Store, m.to.Store, m.opts); err != nil {
		return m.fail(err)
	}
	if !st.Hold.Held {
		fmt.Fprintf(m.app.Stdout, "the destination %s%s is not held: nothing to release\n", m.to.Outbox, m.to.In())
		return nil
	}
	fmt.Fprintf(m.app.Stdout, "released the destination %s%s (move %s): its relays deliver its %d entries at their next fetch\n", m.to.Outbox, m.to.In(), st.MoveID, st.Destination.Total())
	return nil
}

func (m *mover) unseal(ctx context.Context) error {
	st, err := move.Inspect(ctx, m.from.Store, m.to.Store, m.opts)
	if err != nil {
		return m.fail(err)
	}
	if !st.Sealed {
		fmt.Fprintf(m.app.Stdout, "the source %s%s is not sealed: nothing to unseal\n", m.from.Outbox, m.from.In())
		return nil
	}
	if err := move.Unseal(ctx, m.from.Store); err != nil {
		return m.fail(err)
	}
	fmt.Fprintf(m.app.Stdout, "unsealed the source %s%s: appends to it work again\n", m.from.Outbox, m.from.In())
	if st.ThisMove {
		fmt.Fprintf(m.app.Stdout, "the destination is still held (it holds %s, moved or appended): outbox move --release lets its relays deliver them; entries of one key in both outboxes are then not delivered in order across the two\n", st.Destination)
	}
	return nil
}

// run is the move itself.
func (m *mover) run(ctx context.Context) error {
	st, err := move.Inspect(ctx, m.from.Store, m.to.Store, m.opts)
	if err != nil {
		return m.fail(err)
	}
	out := m.app.Stdout
	if st.Complete() {
		fmt.Fprintf(out, "the move to %s%s is complete: nothing to do\n", m.to.Outbox, m.to.In())
		return nil
	}
	if st.ThisMove {
		what := fmt.Sprintf("seal the outbox %s%s (appends to it fail from then on) and move its %d entries to %s%s", m.from.Outbox, m.from.In(), st.Source.Total(), m.to.Outbox, m.to.In())
		if err := cli.ConfirmWith(m.app, m.cmd.Yes, what, true, "outbox move --unseal undoes the seal; the moved entries stay in the destination."); err != nil {
			return err
		}
	}
	bar := newMoveBar(m.app, st.Source.Total())
	m.opts.Progress = bar.update
	res, err := move.Run(ctx, m.from.Store, m.to.Store, m.opts)
	bar.done(err == nil)
	if err != nil {
		if res.Moved+res.Skipped > 0 {
			skipped := ""
			if res.Skipped > 0 {
				skipped = fmt.Sprintf(" (and skipped %d already in the destination)", res.Skipped)
			}
			fmt.Fprintf(out, "moved %d entries%s before it stopped: run the same outbox move again to finish (it resumes where it stopped)\n", res.Moved, skipped)
		}
		var why string
		switch {
		case errors.Is(err, context.Canceled):
			why = "interrupted"
		case errors.Is(err, context.DeadlineExceeded) && m.cmd.Timeout > 0:
			why = fmt.Sprintf("gave up after --timeout %s", m.cmd.Timeout)
		}
		if why != "" {
			if res.Sealed {
				return fmt.Errorf("%s: the source stays sealed and the destination held; run the move again to finish", why)
			}
			return fmt.Errorf("%s before the source was sealed: nothing was moved and the source may still take appends; the destination stays held; run the move again", why)
		}
		return m.fail(err)
	}
	skipped := ""
	if res.Skipped > 0 {
		skipped = fmt.Sprintf(", skipped %d already in the destination (a resumed move)", res.Skipped)
	}
	fmt.Fprintf(out, "moved %d entries (%d due, %d waiting, %d parked)%s in %s\n", res.Moved, res.ByState.Due, res.ByState.Waiting, res.ByState.Parked, skipped, cli.Short(res.Took))
	fmt.Fprintf(out, "the source %s%s is sealed and empty; the destination %s%s is released: its relays deliver now\n", m.from.Outbox, m.from.In(), m.to.Outbox, m.to.In())
	return nil
}

// moveBar shows a move's progress: a bar on a terminal (entries moved of
// the total, the rate), and a line for each lease the move waits for.
type moveBar struct {
	app   *cli.App
	p     *mpb.Progress
	bar   *mpb.Bar
	lines io.Writer

	mu     sync.Mutex
	warned map[string]bool
}

func newMoveBar(app *cli.App, total int64) *moveBar {
	b := &moveBar{app: app, lines: app.Stderr, warned: map[string]bool{}}
	if !app.StderrTerminal || total < cli.ProgressMin {
		return b
	}
	b.p = mpb.New(mpb.WithOutput(app.Stderr), mpb.WithAutoRefresh(), mpb.WithWidth(40))
	b.bar = b.p.AddBar(total,
		mpb.PrependDecorators(decor.Name("move "), decor.CountersNoUnit("%d/%d")),
		mpb.AppendDecorators(decor.Percentage(), decor.Name(" "), decor.AverageSpeed(nil, "%.0f/s"), decor.Name(" "), decor.AverageETA(decor.ET_STYLE_GO)),
	)
	b.lines = b.p
	return b
}

func (b *moveBar) update(p move.Progress) {
	if b.bar != nil {
		b.bar.SetCurrent(min(p.Moved+p.Skipped, p.Total))
	}
	if w := p.Waiting; w != nil {
		key := strconv.Itoa(w.Partition) + "/" + w.Owner
		b.mu.Lock()
		seen := b.warned[key]
		b.warned[key] = true
		b.mu.Unlock()
		if seen {
			return
		}
		who := "another owner"
		if w.Owner != "" {
			who = fmt.Sprintf("%s until %s", cli.Cell(w.Owner), w.Expires.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(b.lines, "waiting for source partition %d: its lease is held by %s (stop the source's relays: SIGTERM releases their leases at once)\n", w.Partition, who)
	}
}

func (b *moveBar) done(ok bool) {
	if b.p == nil {
		return
	}
	if ok {
		b.bar.SetCurrent(b.bar.Current())
		b.bar.SetTotal(-1, true)
	} else {
		b.bar.Abort(false)
	}
	b.p.Wait()
	b.p = nil
}

// Help is the detailed help of outbox move (kong.HelpProvider).
func (c *MoveCmd) Help() string {
	return `Moves a live outbox to another one: another store or backend (Postgres, MySQL and Redis, either way), or the same backend under another name with another partition count. Every entry keeps its state (due, scheduled, retrying, parked, attempts, last error) and each key its order. Create the destination first with 'outbox migrate up'.

  1. outbox move --from URL --to URL --prepare
     holds the empty destination: its relays deliver nothing yet. Deploy them.
  2. Roll the services over to append to the destination; the source's relays keep delivering the source.
  3. outbox move --from URL --to URL
     seals the source (a straggler's append fails), waits for each source partition's lease (stop the source's relays now: SIGTERM releases their leases at once), moves every entry and releases the destination, whose relays deliver each key's moved entries before its new ones. Interrupted, run it again: it resumes, nothing lost, nothing moved twice.

--dry-run and --verify print both sides; --verify exits 1 until the move is complete. --release unholds the destination (rolls back before the seal); --unseal rolls the seal back. The store URLs may also come from OUTBOX_MOVE_FROM and OUTBOX_MOVE_TO.`
}
