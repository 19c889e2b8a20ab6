package app

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/alecthomas/kong"
)

// writeConfig writes a config file of the test's own.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigPrecedence: a flag wins over the environment, which wins over
// the config file; an empty variable counts as unset. (Not parallel: it
// sets OUTBOX_STORE. The unknown schemes make each source visible in the
// error without connecting anywhere.)
func TestConfigPrecedence(t *testing.T) {
	file := writeConfig(t, "store: filescheme://h/db\nschema: fileschema\n")
	tests := []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"FileOnly", "", nil, `"filescheme"`},
		{"EnvOverFile", "envscheme://h/db", nil, `"envscheme"`},
		{"FlagOverEnv", "envscheme://h/db", []string{"--store", "flagscheme://h/db"}, `"flagscheme"`},
		{"FlagOverFile", "", []string{"--store", "flagscheme://h/db"}, `"flagscheme"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OUTBOX_STORE", tc.env)
			args := append([]string{"status", "--config", file}, tc.args...)
			cliFails(t, 2, []string{"unknown store URL scheme " + tc.want}, args...)
		})
	}
	t.Run("ConfigFromTheEnvironment", func(t *testing.T) {
		t.Setenv("OUTBOX_STORE", "")
		t.Setenv("OUTBOX_CONFIG", file)
		cliFails(t, 2, []string{`unknown store URL scheme "filescheme"`}, "status")
	})
	t.Run("FlagOverFileWithoutEnv", func(t *testing.T) {
		t.Setenv("OUTBOX_STORE", "")
		file := writeConfig(t, "schema: fileschema\n")
		if got := cliOK(t, "migrate", "sql", "--config", file, "--partitions", "1"); !strings.Contains(got, `"fileschema"."outbox"`) {
			t.Fatalf("schema from the file:\n%.300s", got)
		}
		if got := cliOK(t, "migrate", "sql", "--config", file, "--partitions", "1", "--schema", "flagschema"); !strings.Contains(got, `"flagschema"."outbox"`) || strings.Contains(got, "fileschema") {
			t.Fatalf("schema from the flag:\n%.300s", got)
		}
	})
}

// TestConfigErrors: a bad file stops the run with exit 2 and a message
// that names the file, the key and the fix.
func TestConfigErrors(t *testing.T) {
	t.Setenv("OUTBOX_STORE", "")
	tests := []struct {
		name, body string
		want       []string
	}{
		{"UnknownKey", "stroe: postgres://h/db\n", []string{`unknown key "stroe"`, "store"}},
		{"PerRunKey", "store: filescheme://h\nyes: true\n", []string{`"yes" cannot be set in the file`, "--yes on the command line"}},
		{"PartitionsKey", "partitions: 8\n", []string{`"partitions" cannot be set in the file`}},
		{"FilterKey", "topic: orders\n", []string{`"topic" cannot be set in the file`}},
		{"NotAMapping", "- store\n", []string{"the top level must be a mapping"}},
		{"Twice", "store: a://h\nstore: b://h\n", []string{`"store" is given twice`}},
		{"NotYAML", "store: [unclosed\n", []string{"is not valid YAML"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cliFails(t, 2, tc.want, "status", "--config", writeConfig(t, tc.body))
		})
	}
	t.Run("MissingFile", func(t *testing.T) {
		cliFails(t, 2, []string{"reading the config file", "fix the path given by --config"}, "status", "--config", filepath.Join(t.TempDir(), "nope.yaml"))
	})
	t.Run("KeyOfAnotherCommand", func(t *testing.T) {
		// timeout: is a flag of status, not of migrate sql: ignored there.
		file := writeConfig(t, "timeout: 1m\nschema: s1\n")
		if got := cliOK(t, "migrate", "sql", "--config", file, "--partitions", "1"); !strings.Contains(got, `"s1"."outbox"`) {
			t.Fatalf("migrate sql with a config file:\n%.300s", got)
		}
	})
}

// TestConfigHelpListsPerRunFlags: 'outbox help config' names every flag
// the file may not set, and no other.
func TestConfigHelpListsPerRunFlags(t *testing.T) {
	t.Parallel()
	var root CLI
	parser, err := kong.New(&root, kong.Bind(&cli.App{}), cli.DefaultVars())
	if err != nil {
		t.Fatal(err)
	}
	// A name is per-run when no command's flag of that name may be set
	// from the file (that is how Validate judges a key); the demo's own
	// flags are covered by "the demo's flags".
	settable, perRun := map[string]bool{}, map[string]bool{}
	onlyDemo := map[string]bool{}
	var walk func(n *kong.Node, demo bool)
	walk = func(n *kong.Node, demo bool) {
		for _, f := range n.Flags {
			if f.Name == "config" || f.Name == "help" {
				continue
			}
			if f.Tag.Has("noconfig") {
				perRun[f.Name] = true
				if _, seen := onlyDemo[f.Name]; !seen {
					onlyDemo[f.Name] = demo
				}
				onlyDemo[f.Name] = onlyDemo[f.Name] && demo
			} else {
				settable[f.Name] = true
			}
		}
		for _, c := range n.Children {
			walk(c, demo || c.Name == "demo")
		}
	}
	walk(parser.Model.Node, false)
	for name := range perRun {
		if settable[name] || onlyDemo[name] {
			delete(perRun, name)
		}
	}
	if len(perRun) == 0 {
		t.Fatal("no flag is tagged noconfig")
	}
	_, list, _ := strings.Cut(cli.ConfigHelp, "What one run selects or confirms")
	list, _, _ = strings.Cut(list, "\n\n")
	for name := range perRun {
		if !strings.Contains(list, "--"+name) {
			t.Errorf("'outbox help config' does not say that --%s cannot be set in the file", name)
		}
	}
	for _, m := range regexp.MustCompile(`--([a-z-]+)`).FindAllStringSubmatch(list, -1) {
		if !perRun[m[1]] && !onlyDemo[m[1]] {
			t.Errorf("'outbox help config' says --%s cannot be set in the file, but it can", m[1])
		}
	}
}
