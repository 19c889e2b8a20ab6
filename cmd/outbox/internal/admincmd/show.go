package admincmd

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/outboxrelay/outbox"
)

// ShowCmd shows one entry.
type ShowCmd struct {
	cli.StoreFlags
	cli.OutputFlags
	ID       string        `arg:"" name:"id" help:"The entry's ID."`
	MaxBytes int           `name:"max-bytes" placeholder:"N" default:"65536" help:"Show at most the first N bytes of the payload, and say how many were cut (0: the whole payload)."`
	Timeout  time.Duration `default:"30s" help:"Give up after this long."`
}

// ShowJSON is the shape of show -o json.
type ShowJSON struct {
	EntryJSON
	// State is "pending" (scheduled, due, retrying, held back or claimed)
	// or "parked".
	State string `json:"state"`
	// DueAt is when the entry is next due; null when parked.
	DueAt *time.Time `json:"due_at"`
	// PayloadBase64 is the payload, always: its first --max-bytes bytes
	// when PayloadCut.
	PayloadBase64 string `json:"payload_base64"`
	// PayloadText is the payload (as shown) when it is valid UTF-8.
	PayloadText *string `json:"payload_text,omitempty"`
	// PayloadJSON is the payload when it is a JSON object or array and
	// not cut.
	PayloadJSON json.RawMessage `json:"payload_json,omitempty"`
	// PayloadCut reports whether the payload shown is cut to --max-bytes;
	// PayloadBytes holds the full size.
	PayloadCut bool `json:"payload_cut"`
	// Deferred reports that an open circuit breaker deferred the entry
	// (not an attempt): it holds back the later entries of its key.
	Deferred bool `json:"deferred"`
	// History is the entry's last attempts, oldest first ([] when it was
	// never attempted).
	History []AttemptJSON `json:"history"`
}

// Run shows the entry.
func (c *ShowCmd) Run(app *cli.App) error {
	return c.StoreFlags.With(c.Timeout, cli.OpenOptions{}, func(ctx context.Context, o *cli.Opened) error {
		return c.show(ctx, app, o)
	})
}

func (c *ShowCmd) show(ctx context.Context, app *cli.App, o *cli.Opened) error {
	lk, ok := o.Store.(outbox.Looker)
	if !ok {
		return fmt.Errorf("this backend (%T) does not implement outbox.Looker, which show needs", o.Store)
	}
	info, err := lk.Lookup(ctx, c.ID)
	if errors.Is(err, outbox.ErrNotFound) {
		return fmt.Errorf("no pending or parked entry has ID %q in %s (never appended, already sent, or cancelled)", c.ID, o.Outbox)
	}
	if err != nil {
		return o.Explain(err)
	}
	if c.MaxBytes < 0 {
		return cli.UsageError("--max-bytes must be 0 (the whole payload) or more")
	}
	if c.JSON() {
		return cli.WriteJSON(app.Stdout, showJSON(info, c.MaxBytes))
	}
	return printEntry(app.Stdout, info, time.Now(), c.MaxBytes)
}

// showJSON is show -o json of info, its payload cut to maxBytes (0: not cut).
func showJSON(info outbox.EntryInfo, maxBytes int) ShowJSON {
	shown, cut := cutPayload(info.Payload, maxBytes)
	j := ShowJSON{EntryJSON: toEntryJSON(info.Entry), State: state(info), PayloadBase64: base64.StdEncoding.EncodeToString(shown), PayloadCut: cut,
		Deferred: info.Deferred, History: historyJSON(info.History)}
	if !info.DueAt.IsZero() {
		t := info.DueAt.UTC()
		j.DueAt = &t
	}
	if utf8.Valid(shown) {
		s := string(shown)
		j.PayloadText = &s
	}
	if !cut && isJSONDoc(shown) {
		j.PayloadJSON = json.RawMessage(shown)
	}
	return j
}

// cutPayload returns the first maxBytes bytes of p (all of p when
// maxBytes is 0 or p is no longer), backing off to the start of a UTF-8
// character when p is UTF-8, and whether it cut anything.
func cutPayload(p []byte, maxBytes int) ([]byte, bool) {
	if maxBytes == 0 || len(p) <= maxBytes {
		return p, false
	}
	n := maxBytes
	if utf8.Valid(p) {
		for n > 0 && !utf8.RuneStart(p[n]) {
			n--
		}
	}
	return p[:n], true
}

func state(info outbox.EntryInfo) string {
	if info.Parked {
		return "parked"
	}
	return "pending"
}

// printEntry prints an entry for people.
// The payload is cut to maxBytes (0: not cut), with a line that says so.
func printEntry(out io.Writer, info outbox.EntryInfo, now time.Time, maxBytes int) error {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	due := "- (parked: requeue it to deliver it again)"
	if !info.Parked {
		due = ts(info.DueAt)
		if d := info.DueAt.Sub(now); d > 0 {
			due += " (in " + cli.Short(d) + ")"
		} else {
			due += " (due " + cli.Short(-d) + " ago)"
		}
	}
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%-11s %s\n", k, v) }
	row("id", cli.Cell(info.ID))
	row("state", state(info))
	row("topic", cli.Cell(info.Topic))
	row("key", cli.Cell(info.Key))
	row("partition", fmt.Sprint(info.Partition))
	row("attempts", fmt.Sprint(info.Attempts))
	if info.Deferred {
		row("deferred", "yes (an open circuit breaker held it back without an attempt; it holds back the later entries of its key)")
	}
	row("created", ts(info.CreatedAt))
	row("not before", ts(info.NotBefore))
	row("due", due)
	if len(info.Headers) == 0 {
		row("headers", "(none)")
	} else {
		row("headers", "")
		keys := make([]string, 0, len(info.Headers))
		for k := range info.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %s: %s\n", cli.OneLine(k), cli.OneLine(info.Headers[k]))
		}
	}
	if info.LastError == "" {
		row("last error", "(none)")
	} else {
		row("last error", "")
		b.WriteString(indent(cli.Printable(info.LastError), "  "))
	}
	writeHistory(&b, info.History)
	shown, cut := cutPayload(info.Payload, maxBytes)
	_, body := renderPayload(shown) // a cut JSON document shows as text
	kind := payloadKind(info.Payload)
	row("payload", fmt.Sprintf("%d bytes, %s", len(info.Payload), kind))
	b.WriteString(body)
	if cut {
		fmt.Fprintf(&b, "(payload cut: showed the first %d of %d bytes, %d left out; --max-bytes 0 shows it all)\n", len(shown), len(info.Payload), len(info.Payload)-len(shown))
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// writeHistory writes an entry's attempts, oldest first: when, by which
// relay, and the error in full, indented.
func writeHistory(b *strings.Builder, h []outbox.Attempt) {
	if len(h) == 0 {
		fmt.Fprintf(b, "%-11s %s\n", "history", "(no attempt recorded)")
		return
	}
	what := fmt.Sprintf("the last %d attempts", len(h))
	if len(h) == 1 {
		what = "1 attempt"
	}
	fmt.Fprintf(b, "%-11s %s, oldest first (the last %d are kept)\n", "history", what, outbox.MaxAttemptHistory)
	for i, a := range h {
		fmt.Fprintf(b, "  %d. %s by %s\n", i+1, a.At.UTC().Format(time.RFC3339Nano), cli.Cell(a.Owner))
		b.WriteString(indent(cli.Printable(a.Error), "     "))
	}
}

// renderPayload shows a payload: pretty-printed when it is a JSON object
// or array, as it is when it is printable text, else as a hex dump.
func renderPayload(p []byte) (kind, body string) {
	switch {
	case len(p) == 0:
		return "empty", ""
	case isJSONDoc(p):
		var buf bytes.Buffer
		if err := json.Indent(&buf, p, "", "  "); err == nil {
			return "JSON", buf.String() + "\n"
		}
	case isText(p):
		s := string(p)
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		return "text", s
	}
	return "binary, hex", hex.Dump(p)
}

// payloadKind is the kind renderPayload gives p, without rendering it.
func payloadKind(p []byte) string {
	switch {
	case len(p) == 0:
		return "empty"
	case isJSONDoc(p):
		return "JSON"
	case isText(p):
		return "text"
	}
	return "binary, hex"
}

// isJSONDoc reports whether p is a JSON object or array.
func isJSONDoc(p []byte) bool {
	t := bytes.TrimSpace(p)
	return len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t)
}

// isText reports whether p is UTF-8 text without control characters
// other than tab, newline and carriage return.
func isText(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, r := range string(p) {
		if unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' {
			return false
		}
	}
	return true
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}
