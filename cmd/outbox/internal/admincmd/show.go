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
	ID      string        `arg:"" name:"id" help:"The entry's ID."`
	Timeout time.Duration `default:"30s" help:"Give up after this long."`
}

// ShowJSON is the shape of show -o json.
type ShowJSON struct {
	EntryJSON
	// State is "pending" (scheduled, due, retrying, held back or claimed)
	// or "parked".
	State string `json:"state"`
	// DueAt is when the entry is next due; null when parked.
	DueAt *time.Time `json:"due_at"`
	// PayloadBase64 is the payload, always.
	PayloadBase64 string `json:"payload_base64"`
	// PayloadText is the payload when it is valid UTF-8.
	PayloadText *string `json:"payload_text,omitempty"`
	// PayloadJSON is the payload when it is a JSON object or array.
	PayloadJSON json.RawMessage `json:"payload_json,omitempty"`
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
	if c.JSON() {
		j := ShowJSON{EntryJSON: toEntryJSON(info.Entry), State: state(info), PayloadBase64: base64.StdEncoding.EncodeToString(info.Payload)}
		if !info.DueAt.IsZero() {
			t := info.DueAt.UTC()
			j.DueAt = &t
		}
		if utf8.Valid(info.Payload) {
			s := string(info.Payload)
			j.PayloadText = &s
		}
		if isJSONDoc(info.Payload) {
			j.PayloadJSON = json.RawMessage(info.Payload)
		}
		return cli.WriteJSON(app.Stdout, j)
	}
	return printEntry(app.Stdout, info, time.Now())
}

func state(info outbox.EntryInfo) string {
	if info.Parked {
		return "parked"
	}
	return "pending"
}

// printEntry prints an entry for people.
func printEntry(out io.Writer, info outbox.EntryInfo, now time.Time) error {
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
	kind, body := renderPayload(info.Payload)
	row("payload", fmt.Sprintf("%d bytes, %s", len(info.Payload), kind))
	b.WriteString(body)
	_, err := io.WriteString(out, b.String())
	return err
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
