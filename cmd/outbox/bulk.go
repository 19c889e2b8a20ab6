package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// errNotConfirmed is the error of a bulk change the operator declined.
var errNotConfirmed = errors.New("not confirmed: nothing was changed")

// confirm asks the operator to confirm a bulk destructive change (what
// describes it) unless yes is set. Without a terminal to ask on it refuses
// with a usage error that says to pass --yes.
func confirm(app *App, yes bool, what string, hasDryRun bool) error {
	return confirmWith(app, yes, what, hasDryRun, "This cannot be undone.")
}

// confirmWith is confirm with its own sentence on what undoing takes.
func confirmWith(app *App, yes bool, what string, hasDryRun bool, undo string) error {
	if yes {
		return nil
	}
	if !app.StdinTerminal {
		hint := ""
		if hasDryRun {
			hint = " (or --dry-run to list what it would change)"
		}
		return usageError("refusing to %s without a confirmation, and there is no terminal to ask on: pass --yes to go ahead%s", what, hint)
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
	return errNotConfirmed
}

// progressMin is the least number of entries that gets a progress bar.
const progressMin = 200

// progress reports bulk work: a bar on stderr when stderr is a terminal
// and the work is long, nothing otherwise. Lines (the per-ID results) go
// to stdout, or above the bar when stdout is the same terminal.
type progress struct {
	p     *mpb.Progress
	bar   *mpb.Bar
	lines io.Writer
}

func newProgress(app *App, total int, verb string) *progress {
	pr := &progress{lines: app.Stdout}
	if !app.StderrTerminal || total < progressMin {
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

// line prints one result line.
func (pr *progress) line(format string, args ...any) {
	fmt.Fprintf(pr.lines, format+"\n", args...)
}

// add counts n entries done.
func (pr *progress) add(n int) {
	if pr.bar != nil {
		pr.bar.IncrBy(n)
	}
}

// done removes the bar (at once when the work stopped early).
func (pr *progress) done() {
	if pr.p == nil {
		return
	}
	if !pr.bar.Completed() {
		pr.bar.Abort(false)
	}
	pr.p.Wait()
	pr.p = nil
}
