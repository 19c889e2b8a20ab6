package relaycmd

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestOpsDocsListEveryRelayFlag: docs/operations.md documents every flag
// of outbox relay (the store's, each sink's and the relay's own) with its
// environment variable, in a table row of its own ("| `--flag ..."), and
// names no flag the relay does not have.
func TestOpsDocsListEveryRelayFlag(t *testing.T) {
	b, err := os.ReadFile(opsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var walk func(ty reflect.Type)
	flags := map[string]bool{}
	walk = func(ty reflect.Type) {
		for i := range ty.NumField() {
			f := ty.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			name := f.Tag.Get("name")
			if name == "" {
				continue
			}
			flags["--"+name] = true
			row := rowOf(doc, "`--"+name)
			if row == "" {
				t.Errorf("%s has no table row for --%s", opsDoc, name)
				continue
			}
			if env := f.Tag.Get("env"); env != "" && !strings.Contains(row, "`"+env+"`") {
				t.Errorf("%s: the row of --%s does not name its variable %s: %s", opsDoc, name, env, row)
			}
		}
	}
	walk(reflect.TypeOf(RelayCmd{}))
	for _, prefix := range []string{"--nats-", "--amqp-", "--kafka-", "--sink-"} {
		for _, rest := range strings.Split(doc, prefix)[1:] {
			end := strings.IndexFunc(rest, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r == '-') })
			if end < 0 {
				end = len(rest)
			}
			if end == 0 || rest[end-1] == '-' && rest[end:end+1] == "*" {
				continue // a family of flags: --kafka-*, --nats-tls-*
			}
			if name := prefix + rest[:end]; !flags[name] {
				t.Errorf("%s names %s, which is no flag of outbox relay", opsDoc, name)
			}
		}
	}
}

// rowOf is the first table row of doc whose first cell starts with cell
// (or lists it after a comma).
func rowOf(doc, cell string) string {
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		for _, part := range strings.Split(first, ", ") {
			if part == cell || strings.HasPrefix(part, cell+" ") || strings.HasPrefix(part, cell+"`") {
				return line
			}
		}
	}
	return ""
}

// TestOpsDocsAnchorsResolve: every link within docs/operations.md,
// (#anchor), leads to one of its headings.
func TestOpsDocsAnchorsResolve(t *testing.T) {
	b, err := os.ReadFile(opsDoc)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			headings[githubAnchor(strings.TrimLeft(line, "# "))] = true
		}
	}
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(b), -1) {
		if !headings[m[1]] {
			t.Errorf("%s links to #%s, which no heading of it has", opsDoc, m[1])
		}
	}
}
