package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// The names of the other inputs ops parses, as [FieldError] reports them.
const (
	FieldState     = "state"
	FieldAfter     = "after"
	FieldTopic     = "topic"
	FieldPartition = "partition"
)

// ListFilter is f as the SPI's listings ([outbox.Lister]) take it: the
// error text as it was given, which the store compares folding ASCII
// letters only ([outbox.ListFilter.Error]), where Match folds every
// letter.
func (f Filter) ListFilter() outbox.ListFilter {
	return outbox.ListFilter{Topic: f.topic, Key: f.key, Error: f.errRaw, Since: f.since, Until: f.until}
}

// ParseState parses the name of an entry state ("due", "scheduled",
// "retrying", "parked"; see [outbox.EntryStates]), ignoring case and
// surrounding space. It returns a [*FieldError] for [FieldState] that
// lists the states for anything else.
func ParseState(s string) (outbox.EntryState, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, st := range outbox.EntryStates {
		if string(st) == t {
			return st, nil
		}
	}
	names := make([]string, len(outbox.EntryStates))
	for i, st := range outbox.EntryStates {
		names[i] = string(st)
	}
	return "", &FieldError{Field: FieldState, Err: fmt.Errorf("%q is not a state: write one of %s", s, strings.Join(names, ", "))}
}

// Entries lists up to limit entries in state that f matches, in the byte
// order of their IDs, starting after the ID after ("" for the first page).
// next is the ID to continue after: the last entry listed when more
// match, "" when this is the last page. limit must be positive (the
// store refuses others). It reads limit+1 entries to tell whether more
// follow. Store errors are returned as they are.
func Entries(ctx context.Context, l outbox.Lister, state outbox.EntryState, f Filter, after string, limit int) (found []outbox.EntryInfo, next string, err error) {
	if limit <= 0 {
		return nil, "", fmt.Errorf("ops: limit %d: %w: it must be positive", limit, outbox.ErrInvalidArgument)
	}
	found, err = l.Entries(ctx, state, f.ListFilter(), after, limit+1)
	if err != nil {
		return nil, "", err
	}
	if len(found) > limit {
		found = found[:limit]
		next = found[limit-1].ID
	}
	return found, next, nil
}

// BlockedCursor is where a page of [Blocked] starts: after the key whose
// head entry has HeadID and was blocked since Since. The zero
// BlockedCursor starts at the first page. Its text form (String,
// [ParseBlockedCursor]) is what a front end shows an operator to type, or
// puts in a link.
type BlockedCursor struct {
	Since  time.Time
	HeadID string
}

// IsZero reports whether c is the first page's cursor.
func (c BlockedCursor) IsZero() bool { return c.Since.IsZero() && c.HeadID == "" }

// String is c as ParseBlockedCursor reads it back: Since in RFC 3339 with
// nanoseconds, a slash, the head's ID ("" for the zero cursor).
func (c BlockedCursor) String() string {
	if c.IsZero() {
		return ""
	}
	return c.Since.UTC().Format(time.RFC3339Nano) + "/" + c.HeadID
}

// ParseBlockedCursor parses the text form of a [BlockedCursor]; "" is the
// zero cursor. Anything else that is not a time, a slash and an ID is a
// [*FieldError] for [FieldAfter].
func ParseBlockedCursor(s string) (BlockedCursor, error) {
	if s == "" {
		return BlockedCursor{}, nil
	}
	at, id, ok := strings.Cut(s, "/")
	since, err := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || id == "" {
		return BlockedCursor{}, &FieldError{Field: FieldAfter, Err: fmt.Errorf("%q is not a blocked-keys position: pass on the value the previous page gave (a time, a slash and an entry ID)", s)}
	}
	return BlockedCursor{Since: since, HeadID: id}, nil
}

// CursorOf is the cursor of the page that follows b.
func CursorOf(b outbox.BlockedKey) BlockedCursor {
	return BlockedCursor{Since: b.Since, HeadID: b.Head.ID}
}

// Blocked lists up to limit blocked keys whose head entry f matches, the
// longest blocked first (see [outbox.Lister.BlockedKeys]), starting after
// the cursor after. next is the cursor of the next page, the zero cursor
// when this is the last page. limit must be positive. It reads limit+1
// keys to tell whether more follow. Store errors are returned as they
// are.
func Blocked(ctx context.Context, l outbox.Lister, f Filter, after BlockedCursor, limit int) (found []outbox.BlockedKey, next BlockedCursor, err error) {
	if limit <= 0 {
		return nil, next, fmt.Errorf("ops: limit %d: %w: it must be positive", limit, outbox.ErrInvalidArgument)
	}
	var from outbox.BlockedKey
	from.Since, from.Head.ID = after.Since, after.HeadID
	found, err = l.BlockedKeys(ctx, f.ListFilter(), from, limit+1)
	if err != nil {
		return nil, next, err
	}
	if len(found) > limit {
		found = found[:limit]
		next = CursorOf(found[limit-1])
	}
	return found, next, nil
}
