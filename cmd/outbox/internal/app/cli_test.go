package app

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"
)

// TestCLIBasics: help lists the commands and exits 0 however it is asked
// for; every command has its own help; usage errors exit 2 and say how to
// get the usage; failures exit 1; flags go before or after arguments.
func TestCLIBasics(t *testing.T) {
	t.Parallel()
	commands := []string{"migrate up", "migrate down", "migrate status", "migrate sql", "status", "entries", "blocked", "parked", "show", "requeue", "cancel", "purge", "pause", "resume", "relays", "demo", "version"}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string // each must appear
		stderr []string
	}{
		{name: "NoArguments", args: nil, stdout: append([]string{"Usage: outbox <command>"}, commands...)},
		{name: "Help", args: []string{"help"}, stdout: append([]string{"Usage: outbox <command>"}, commands...)},
		{name: "DashH", args: []string{"-h"}, stdout: commands},
		{name: "DashDashHelp", args: []string{"--help"}, stdout: commands},
		{name: "HelpStores", args: []string{"help", "stores"}, stdout: []string{"redis+sentinel://", "rediss+cluster://", "sslrootcert=FILE", "tls_ca=FILE", "sentinel_password="}},
		{name: "HelpConfig", args: []string{"help", "config"}, stdout: []string{"store: postgres://", "kafka-brokers:", "Precedence"}},
		{name: "HelpOfACommand", args: []string{"help", "status"}, stdout: []string{"Usage: outbox status", "--store=URL", "--output=FORMAT"}},
		{name: "HelpOfASubcommand", args: []string{"help", "migrate", "up"}, stdout: []string{"Usage: outbox migrate up", "--partitions=N"}},
		{name: "CommandDashH", args: []string{"parked", "-h"}, stdout: []string{"Usage: outbox parked", "--topic=TOPIC", "--full-error", "--since=TIME"}},
		{name: "Version", args: []string{"version"}, stdout: []string{"outbox test"}},
		{name: "UnknownCommand", args: []string{"frobnicate"}, code: 2, stderr: []string{"unexpected argument frobnicate", "'outbox --help' lists the commands"}},
		{name: "UnknownFlag", args: []string{"status", "--nope"}, code: 2, stderr: []string{"unknown flag --nope", "'outbox status --help'"}},
		{name: "BadEnum", args: []string{"status", "-o", "xml", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--output"}},
		{name: "MissingRequiredFlag", args: []string{"purge", "--store", "postgres://127.0.0.1:1/db"}, code: 2, stderr: []string{"--before", "'outbox purge --help'"}},
		{name: "MigrateWithoutSubcommand", args: []string{"migrate"}, code: 2, stderr: []string{"expected one of"}},
		{name: "FlagsAfterArguments", args: []string{"requeue", "e1", "--all", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"give entry IDs, filters or --all"}},
		{name: "FlagsBeforeArguments", args: []string{"requeue", "--all", "--store", "redis://127.0.0.1:1", "e1"}, code: 2, stderr: []string{"give entry IDs, filters or --all"}},
		{name: "NothingSelected", args: []string{"cancel", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"say which entries"}},
		{name: "BadTime", args: []string{"parked", "--since", "yesterday", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--since", "is not a time"}},
		{name: "EntriesWithoutState", args: []string{"entries", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--state"}},
		{name: "EntriesBadState", args: []string{"entries", "--state", "stuck", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--state:", `"stuck" is not a state: write one of due, scheduled, retrying, parked`}},
		{name: "EntriesBadLimit", args: []string{"entries", "--state", "due", "--limit", "0", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--limit must be at least 1"}},
		{name: "BlockedBadAfter", args: []string{"blocked", "--after", "e1", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--after:", "pass on the value the previous page gave"}},
		{name: "BlockedBadTime", args: []string{"blocked", "--until", "never", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--until", "is not a time"}},
		{name: "PauseNothing", args: []string{"pause", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"say what to act on: --topic TOPIC or --partition N"}},
		{name: "ResumeNothing", args: []string{"resume", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"say what to act on: --topic TOPIC or --partition N"}},
		{name: "PauseBoth", args: []string{"pause", "--topic", "orders", "--partition", "1", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--topic and --partition: give one of them, not both"}},
		{name: "PausePartitionNotANumber", args: []string{"pause", "--partition", "one", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--partition:", `"one" is not a partition number`}},
		{name: "PausePartitionNegative", args: []string{"resume", "--partition=-1", "--store", "redis://127.0.0.1:1"}, code: 2, stderr: []string{"--partition: -1 is out of range"}},
		{name: "Failure", args: []string{"status", "--store", "redis://127.0.0.1:1", "--timeout", "5s"}, code: 1, stderr: []string{"nothing listens at 127.0.0.1:1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, tc.args...)
			if r.code != tc.code {
				t.Fatalf("outbox %s: want exit %d, got %v", strings.Join(tc.args, " "), tc.code, r)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout lacks %q:\n%v", w, r)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%v", w, r)
				}
			}
		})
	}
}

// TestCLIHelpOfEveryCommand: every command's --help exits 0 with its own
// usage line and the flags that command has (and no other command's).
func TestCLIHelpOfEveryCommand(t *testing.T) {
	t.Parallel()
	own := map[string][]string{
		"migrate up":     {"--partitions=N", "--to=VERSION", "--store=URL"},
		"migrate down":   {"--to=VERSION", "--yes"},
		"migrate status": {"--output=FORMAT"},
		"migrate sql":    {"--partitions=N", "--schema=NAME"},
		"status":         {"--output=FORMAT", "--timeout=30s"},
		"parked":         {"--after=ID", "--limit=50", "--full-error", "--topic=TOPIC", "--key=KEY", "--error=TEXT", "--since=TIME", "--until=TIME"},
		"show":           {"<id>", "--output=FORMAT"},
		"requeue":        {"[<id> ...]", "--all", "--dry-run", "--yes", "--batch=500", "--topic=TOPIC"},
		"cancel":         {"[<id> ...]", "--all", "--dry-run", "--yes", "--error=TEXT"},
		"purge":          {"--before=TIME", "--batch=1000", "--yes"},
		"version":        {},
		"entries":        {"--state=STATE", "--after=ID", "--limit=50", "--full-error", "--topic=TOPIC", "--key=KEY", "--error=TEXT", "--since=TIME", "--until=TIME", "--output=FORMAT"},
		"blocked":        {"--after=POSITION", "--limit=50", "--full-error", "--topic=TOPIC", "--key=KEY", "--error=TEXT", "--since=TIME", "--until=TIME", "--output=FORMAT"},
		"pause":          {"--topic=TOPIC", "--partition=N", "--timeout=30s"},
		"resume":         {"--topic=TOPIC", "--partition=N", "--timeout=30s"},
		"relays":         {"--output=FORMAT", "--timeout=30s"},
	}
	for cmd, flags := range own {
		t.Run(strings.ReplaceAll(cmd, " ", "_"), func(t *testing.T) {
			t.Parallel()
			args := append(strings.Fields(cmd), "--help")
			r := runCLI(t, args...)
			if r.code != 0 || !strings.Contains(r.stdout, "Usage: outbox "+cmd) {
				t.Fatalf("outbox %s --help: %v", cmd, r)
			}
			for _, f := range flags {
				if !strings.Contains(r.stdout, f) {
					t.Errorf("outbox %s --help lacks %s:\n%s", cmd, f, r.stdout)
				}
			}
			if cmd != "migrate up" && cmd != "migrate sql" && strings.Contains(r.stdout, "--partitions") {
				t.Errorf("outbox %s --help offers --partitions, which only creating an outbox takes:\n%s", cmd, r.stdout)
			}
		})
	}
}

// TestJSONHelpListsEveryKey: 'outbox help json' names every key the -o
// json outputs have.
func TestJSONHelpListsEveryKey(t *testing.T) {
	t.Parallel()
	text := cliOK(t, "help", "json")
	now := time.Now()
	samples := []any{
		admincmd.StatusJSON{ByPartition: []admincmd.PartitionJSON{{Lease: &admincmd.LeaseJSON{}}},
			Paused:  &admincmd.PausedJSON{Topics: []admincmd.PausedTopicJSON{{}}, Partitions: []admincmd.PausedPartitionJSON{{}}},
			Health:  &admincmd.HealthJSON{Tables: []admincmd.TableJSON{{}}, Memory: &admincmd.MemoryJSON{}, Warnings: []admincmd.WarningJSON{{}}},
			Archive: &admincmd.ArchiveJSON{}, HealthError: new(string)},
		admincmd.EntriesJSON{Entries: []admincmd.InfoJSON{{History: []admincmd.AttemptJSON{{}}}}},
		admincmd.BlockedJSON{Blocked: []admincmd.BlockedKeyJSON{{Head: admincmd.InfoJSON{History: []admincmd.AttemptJSON{{}}}}}},
		admincmd.RelaysJSON{Relays: []admincmd.RelayJSON{{}}, Unheld: []admincmd.UnheldJSON{{}}},
		admincmd.ParkedJSON{Entries: []admincmd.EntryJSON{{}}},
		admincmd.ShowJSON{PayloadText: new(string), PayloadJSON: json.RawMessage(`{}`), DueAt: &now, History: []admincmd.AttemptJSON{{}}},
		admincmd.MigrateStatusJSON{Migrations: []admincmd.MigrationJSON{{}}},
	}
	var keys func(v any)
	keys = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !strings.Contains(text, `"`+k+`"`) {
					t.Errorf("'outbox help json' does not name %q", k)
				}
				keys(x)
			}
		case []any:
			for _, x := range v {
				keys(x)
			}
		}
	}
	for _, s := range samples {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		keys(v)
	}
}
