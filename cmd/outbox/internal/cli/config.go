package cli

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
	"go.yaml.in/yaml/v3"
)

// ConfigHelp is the reference of the --config file ('outbox help config').
const ConfigHelp = `The config file (--config FILE, or OUTBOX_CONFIG=FILE)

A YAML mapping whose keys are long flag names without the dashes, and whose
values are what the flag would be given. A key applies to every command that
has the flag and is ignored by the others, so one file can serve the relay and
the admin commands:

  store: postgres://app@db.internal:5432/app?sslmode=verify-full
  schema: billing
  timeout: 1m
  kafka-brokers: k1:9092,k2:9092   # the relay's settings, by flag name

A list value is given as a YAML sequence or as a comma-separated string.

Precedence: a flag on the command line wins over the environment (such as
OUTBOX_STORE), which wins over the file; an empty variable counts as unset.

What one run selects or confirms cannot be put in the file: the IDs, the
filters (--state, --topic, --key, --error, --since, --until), --all, --yes,
--dry-run, --partitions (given to 'outbox migrate up' when the outbox is
created), --partition (of pause and resume), --before, --after, --limit,
--full-error, --output and --to, migrate's --inbox, --inbox-table and
--archive-partitioned, and the demo's own flags; and the two outboxes of a move and its mode (--from,
--from-schema, --from-table, --from-prefix, --to-schema, --to-table,
--to-prefix, --prepare, --verify, --release, --unseal; OUTBOX_MOVE_FROM and
OUTBOX_MOVE_TO still work).
An unknown key is an error, so a misspelt key does not go unnoticed.

The file may hold a password (in store:); keep it readable by its user only.
Nothing the CLI prints shows it.
`

// ConfigError is a problem with the --config file; app.Run prints it alone
// (kong prefixes resolver errors with a flag's name).
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

// ConfigResolver gives flags their values from the --config file: a YAML
// mapping of long flag names to values. It skips a flag that was given on
// the command line (kong does not ask), one whose environment variable is
// set (the environment overrides the file), and one tagged noconfig:""
// (what a run selects or confirms).
type ConfigResolver struct {
	secrets *SecretSet

	loaded bool
	path   string
	values map[string]any
	err    error
}

// NewConfigResolver returns a resolver that records the file's secrets in
// secrets.
func NewConfigResolver(secrets *SecretSet) *ConfigResolver {
	return &ConfigResolver{secrets: secrets}
}

var _ kong.Resolver = (*ConfigResolver)(nil)

// Resolve implements kong.Resolver.
func (r *ConfigResolver) Resolve(kctx *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	if err := r.load(kctx); err != nil {
		return nil, err
	}
	if flag.Name == "config" || flag.Name == "help" || flag.Tag.Has("noconfig") {
		return nil, nil
	}
	v, ok := r.values[flag.Name]
	if !ok {
		return nil, nil
	}
	for _, env := range flag.Tag.Envs {
		if os.Getenv(env) != "" {
			return nil, nil
		}
	}
	return v, nil
}

// Validate implements kong.Resolver: every key must name a flag that the
// file may set.
func (r *ConfigResolver) Validate(app *kong.Application) error {
	if r.err != nil || len(r.values) == 0 {
		return r.err
	}
	settable, known := map[string]bool{}, map[string]bool{}
	var names []string
	_ = kong.Visit(app, func(node kong.Visitable, next kong.Next) error {
		if f, ok := node.(*kong.Flag); ok {
			known[f.Name] = true
			if f.Name != "config" && f.Name != "help" && !f.Tag.Has("noconfig") {
				if !settable[f.Name] {
					names = append(names, f.Name)
				}
				settable[f.Name] = true
			}
		}
		return next(nil)
	})
	sort.Strings(names)
	keys := make([]string, 0, len(r.values))
	for k := range r.values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case settable[k]:
		case known[k]:
			return &ConfigError{fmt.Sprintf("config file %s: %q cannot be set in the file: it selects or confirms what one run does, so give --%s on the command line", r.path, k, k)}
		default:
			return &ConfigError{fmt.Sprintf("config file %s: unknown key %q: keys are long flag names without the dashes, one of: %s", r.path, k, strings.Join(names, ", "))}
		}
	}
	return nil
}

// load reads the file named by --config (or OUTBOX_CONFIG) once.
func (r *ConfigResolver) load(kctx *kong.Context) error {
	if r.loaded {
		return r.err
	}
	r.loaded = true
	for _, f := range kctx.Flags() {
		if f.Name == "config" {
			r.path, _ = kctx.FlagValue(f).(string)
		}
	}
	if r.path == "" {
		return nil
	}
	r.values, r.err = readConfig(r.path, r.secrets)
	return r.err
}

// readConfig reads a config file into flag values: scalars as their text
// (kong parses them as it parses a flag), sequences as lists, mappings as
// maps. It records the file's secrets.
func readConfig(path string, secrets *SecretSet) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{fmt.Sprintf("reading the config file: %v: fix the path given by --config (or OUTBOX_CONFIG)", err)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{fmt.Sprintf("config file %s is not valid YAML: %s", path, RedactText(err.Error(), secrets.Known()...))}
	}
	if len(doc.Content) == 0 {
		return map[string]any{}, nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, &ConfigError{fmt.Sprintf("config file %s: the top level must be a mapping of flag names to values, such as \"store: postgres://app@db/app\"", path)}
	}
	values := map[string]any{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		key := k.Value
		if k.Kind != yaml.ScalarNode || key == "" {
			return nil, &ConfigError{fmt.Sprintf("config file %s, line %d: a key must be a flag name", path, k.Line)}
		}
		if _, dup := values[key]; dup {
			return nil, &ConfigError{fmt.Sprintf("config file %s, line %d: %q is given twice", path, k.Line, key)}
		}
		bad := func(what string) error {
			return &ConfigError{fmt.Sprintf("config file %s, line %d: %q: %s", path, v.Line, key, what)}
		}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				continue
			}
			secrets.AddValue(key, v.Value)
			values[key] = v.Value
		case yaml.SequenceNode:
			list := make([]any, 0, len(v.Content))
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode {
					return nil, bad("a list may hold plain values only")
				}
				secrets.AddValue(key, e.Value)
				list = append(list, e.Value)
			}
			values[key] = list
		case yaml.MappingNode:
			m := map[string]any{}
			for j := 0; j+1 < len(v.Content); j += 2 {
				mk, mv := v.Content[j], v.Content[j+1]
				if mk.Kind != yaml.ScalarNode || mv.Kind != yaml.ScalarNode {
					return nil, bad("a mapping may hold plain keys and values only")
				}
				secrets.AddValue(key, mv.Value)
				m[mk.Value] = mv.Value
			}
			values[key] = m
		default:
			return nil, bad("give a value, a list or a mapping")
		}
	}
	return values, nil
}
