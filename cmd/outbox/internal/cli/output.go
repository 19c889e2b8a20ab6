package cli

import (
	"encoding/json"
	"io"
	"time"
)

// OutputFlags choose the output format of a read command.
type OutputFlags struct {
	Output string `short:"o" name:"output" enum:"text,json" default:"text" placeholder:"FORMAT" noconfig:"" help:"Output format: text, or json (a stable shape: outbox help json)."`
}

// JSON reports whether -o json was asked for.
func (f OutputFlags) JSON() bool { return f.Output == "json" }

// WriteJSON writes v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// HoldJSON is a hold, in status and move -o json.
type HoldJSON struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// Short rounds a duration for people.
func Short(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
