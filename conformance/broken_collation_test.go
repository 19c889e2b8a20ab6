package conformance_test

import (
	"context"
	"slices"
	"strings"

	"github.com/outboxrelay/outbox"
)

// collationVariants order listings by a database collation (case and
// accents folded, punctuation ignored) instead of the byte order of IDs,
// while paging with the byte order's ">" (as SQL's ORDER BY id under a
// locale collation with WHERE id > $after in C order would).
var collationVariants = []variant{
	{"parked-collation-order", "Parked sorts by a locale collation while paging by byte order", []string{"Collation/ParkedPagesInByteOrder"}},
	{"entries-collation-order", "Entries sorts by a locale collation while paging by byte order", []string{"Collation/EntriesPageInByteOrder"}},
	{"blocked-keys-collation-ties", "BlockedKeys breaks ties of Since by a locale collation of the head IDs while paging by byte order", []string{"Collation/BlockedKeysTiesInByteOrder"}},
}

// collationKey is the sort key of id under a simplified locale collation:
// letters folded to lower case without accents, punctuation ignored.
func collationKey(id string) string {
	fold := strings.NewReplacer("Ä", "a", "ä", "a", "Ö", "o", "ö", "o", "Ü", "u", "ü", "u")
	return strings.Map(func(r rune) rune {
		switch {
		case 'A' <= r && r <= 'Z':
			return r + 'a' - 'A'
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r > 0x7f:
			return r
		}
		return -1
	}, fold.Replace(id)) + "\x00" + id
}

// byCollation sorts ids by collationKey and returns those after after in
// byte order, at most limit.
func byCollation[T any](all []T, id func(T) string, after string, limit int) []T {
	slices.SortFunc(all, func(x, y T) int { return strings.Compare(collationKey(id(x)), collationKey(id(y))) })
	var out []T
	for _, x := range all {
		if id(x) > after && len(out) < limit {
			out = append(out, x)
		}
	}
	return out
}

// breakParked is the Parked of the collation variant.
func (w *broken) breakParked(ctx context.Context, after string, limit int) ([]outbox.Entry, bool, error) {
	if w.variant != "parked-collation-order" || limit <= 0 {
		return nil, false, nil
	}
	all, err := w.Backend.Parked(ctx, "", 1<<30)
	if err != nil {
		return nil, true, err
	}
	return byCollation(all, func(e outbox.Entry) string { return e.ID }, after, limit), true, nil
}

// collatedEntries is the Entries of the collation variant.
func (w *broken) collatedEntries(ctx context.Context, state outbox.EntryState, f outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	all, err := w.allEntries(ctx, state, f, "")
	if err != nil {
		return nil, err
	}
	return byCollation(all, func(info outbox.EntryInfo) string { return info.ID }, after, limit), nil
}
