// Package cli is what the outbox command's families share: the App every
// command runs with, exit statuses and usage errors, the --config file,
// store URLs and opening an outbox (StoreFlags), secret redaction, output
// helpers (JSON, table cells, confirmations, progress bars) and the
// dashboard's HTTP hosting. It imports no command family.
package cli

import (
	"fmt"
	"io"
)

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

	// Secrets are the secrets this run knows of; output passes through
	// writers that remove them. Nil outside a run of the CLI.
	Secrets *SecretSet
	// Stop, when set, ends the commands that run until a signal (ui, the
	// relay, the demo's --ui wait) as SIGINT would; tests set it.
	Stop <-chan struct{}
}

// ExitError carries an exit status other than 1.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// UsageError marks an error as a usage error (exit status 2).
func UsageError(format string, args ...any) error {
	return &ExitError{Code: 2, Err: fmt.Errorf(format, args...)}
}
