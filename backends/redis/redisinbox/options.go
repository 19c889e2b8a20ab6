package redisinbox

import (
	"fmt"
	"strings"

	"github.com/outboxrelay/outbox/inbox"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "{inbox}"

// Options configure a [Store]. The zero value is usable: every zero field
// takes its documented default.
type Options struct {
	// Prefix is the key prefix of this inbox. It must contain exactly one
	// well-formed, non-empty hash tag "{...}" and no other brace: every
	// key of the inbox shares that tag, so they all live in one Redis
	// Cluster slot and one MULTI/EXEC can hold them with the handler's
	// effects (whose keys must carry the same tag; see [Store.Key]).
	// Consumers that must not share a slot use inboxes of their own, with
	// different tags. Default [DefaultPrefix], "{inbox}".
	Prefix string
}

func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := validatePrefix(o.Prefix); err != nil {
		return o, err
	}
	return o, nil
}

// validatePrefix checks that p holds exactly one well-formed, non-empty
// hash tag and no other brace (the same rule as the outbox backend's
// Options.Prefix).
func validatePrefix(p string) error {
	const fix = `; write the prefix with exactly one non-empty hash tag, for example "{inbox}" or "billing:{inbox}"`
	open, close := strings.Count(p, "{"), strings.Count(p, "}")
	switch {
	case open == 0 && close == 0:
		return fmt.Errorf("redisinbox: Options.Prefix %q has no hash tag, so the inbox's keys and the handler's effects would spread over Redis Cluster slots and their MULTI/EXEC would fail with CROSSSLOT%s: %w", p, fix, inbox.ErrInvalidArgument)
	case open != 1 || close != 1:
		return fmt.Errorf("redisinbox: Options.Prefix %q must contain exactly one '{' and one '}' (it has %d and %d): Redis Cluster hashes only the first tag, and a second one is a mistake waiting to happen%s: %w", p, open, close, fix, inbox.ErrInvalidArgument)
	}
	i, j := strings.IndexByte(p, '{'), strings.IndexByte(p, '}')
	switch {
	case j < i:
		return fmt.Errorf("redisinbox: Options.Prefix %q has '}' before '{'%s: %w", p, fix, inbox.ErrInvalidArgument)
	case j == i+1:
		return fmt.Errorf("redisinbox: Options.Prefix %q has an empty hash tag \"{}\", which Redis Cluster ignores (it would hash the whole key)%s: %w", p, fix, inbox.ErrInvalidArgument)
	}
	return nil
}
