package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// ErrNotConfirmed is the error of a bulk change the operator declined.
var ErrNotConfirmed = errors.New("not confirmed: nothing was changed")

// Confirm asks the operator to confirm a bulk destructive change (what
// describes it) unless yes is set. Without a terminal to ask on it refuses
// with a usage error that says to pass --yes.
func Confirm(app *App, yes bool, what string, hasDryRun bool) error {
	return ConfirmWith(app, yes, what, hasDryRun, "This cannot be undone.")
}

// ConfirmWith is confirm with its own sentence on what undoing takes.
func ConfirmWith(app *App, yes bool, what string, hasDryRun bool, undo string) error {
	if yes {
		return nil
	}
	if !app.StdinTerminal {
		hint := ""
		if hasDryRun {
			hint = " (or --dry-run to list what it would change)"
		}
		return UsageError("refusing to %s without a confirmation, and there is no terminal to ask on: pass --yes to go ahead%s", what, hint)
	}
	fmt.Fprintf(app.Stderr, "About to %s. %s\nType yes to go on: ", what, undo)
	line, err := bufio.NewReader(app.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading the confirmation: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "yes", "y":
		return nil
	}
	return ErrNotConfirmed
}

// ProgressMin is the least number of entries that gets a progress bar.
const ProgressMin = 200

// Progress reports bulk work: a bar on stderr when stderr is a terminal
// and the work is long, nothing otherwise. Lines (the per-ID results) go
// to stdout, or above the bar when stdout is the same terminal.
type Progress struct {
	p     *mpb.Progress
	bar   *mpb.Bar
	lines io.Writer
	total int
	// brief: Entry lines are counted in left, not printed.
	brief bool
	left  int
}

// BriefMin is the least number of entries whose routine per-entry lines
// (Entry) a bulk command leaves out unless asked for them (-v).
const BriefMin = 21

// Brief leaves out the routine per-entry lines (Entry) when the work
// holds BriefMin entries or more, unless verbose is set.
func (pr *Progress) Brief(verbose bool) {
	pr.brief = !verbose && pr.total >= BriefMin
}

// Entry prints one routine result line, or counts it as left out (Brief).
func (pr *Progress) Entry(format string, args ...any) {
	if pr.brief {
		pr.left++
		return
	}
	pr.Line(format, args...)
}

// LeftOut is the number of Entry lines Brief left out.
func (pr *Progress) LeftOut() int { return pr.left }

func NewProgress(app *App, total int, verb string) *Progress {
	pr := &Progress{lines: app.Stdout, total: total}
	if !app.StderrTerminal || total < ProgressMin {
		return pr
	}
	pr.p = mpb.New(mpb.WithOutput(app.Stderr), mpb.WithAutoRefresh(), mpb.WithWidth(40))
	pr.bar = pr.p.AddBar(int64(total),
		mpb.PrependDecorators(decor.Name(verb+" "), decor.CountersNoUnit("%d/%d")),
		mpb.AppendDecorators(decor.Percentage(), decor.Name(" "), decor.AverageETA(decor.ET_STYLE_GO)),
	)
	if app.StdoutTerminal {
		pr.lines = pr.p
	}
	return pr
}

// Line prints one result line, always (exceptions: refused, not found).
func (pr *Progress) Line(format string, args ...any) {
	fmt.Fprintf(pr.lines, format+"\n", args...)
}

// Add counts n entries done.
func (pr *Progress) Add(n int) {
	if pr.bar != nil {
		pr.bar.IncrBy(n)
	}
}

// Done removes the bar (at once when the work stopped early).
func (pr *Progress) Done() {
	if pr.p == nil {
		return
	}
	if !pr.bar.Completed() {
		pr.bar.Abort(false)
	}
	pr.p.Wait()
	pr.p = nil
}
