package outbox

import (
	"errors"
	"fmt"
	"strconv"
)

// HeaderKeySeq is the header that carries an entry's per-key sequence
// number, as decimal text ("1", "2", ...), when the backend that appended
// it numbers keys (the KeySequence option of the Postgres, Redis and
// memory backends). The backend puts it into the entry's Headers at
// append, inside the caller's transaction (the memory backend at commit);
// the relay publishes it like any other header (the Kafka sink as a record
// header), and Lookup, Parked and fetched entries show it.
//
// What is promised, per outbox and per non-empty key: the committed
// entries of the key are numbered 1, 2, 3, ... in append order, without
// a gap and without a repeat. A rolled-back append leaves no gap and an
// idempotent re-append of an existing ID takes no number. Entries with an
// empty Key get no number. A cancelled entry leaves a gap (its number is
// never published); a requeued or retried entry keeps its number. A
// consumer that sees a number at or below the last one of its key got a
// duplicate (at-least-once delivery); one that sees a jump missed entries,
// or the entries it missed were cancelled.
const HeaderKeySeq = "outbox-key-seq"

// CheckKeySeqHeaders rejects entries that set [HeaderKeySeq] themselves,
// with an error wrapping [ErrInvalidEntry] that names the first such entry.
// A backend that numbers keys calls it in AppendInTx before anything is
// written, so a caller can never forge or override a sequence number.
func CheckKeySeqHeaders(entries []Entry) error {
	for i := range entries {
		if v, ok := entries[i].Headers[HeaderKeySeq]; ok {
			return fmt.Errorf("%w: entry %d (id %q): header %q is set (to %q), but the backend assigns it because per-key sequence numbers are on; remove the header from the entry",
				ErrInvalidEntry, i, entries[i].ID, HeaderKeySeq, v)
		}
	}
	return nil
}

// FormatKeySeq returns the header value of sequence number n.
func FormatKeySeq(n int64) string { return strconv.FormatInt(n, 10) }

// ParseKeySeq parses a [HeaderKeySeq] value: decimal digits of a number of
// at least 1, no sign, no leading zeros, no spaces.
func ParseKeySeq(v string) (int64, error) {
	if v == "" || v[0] < '1' || v[0] > '9' {
		return 0, fmt.Errorf("outbox: header %s value %q is not a sequence number (decimal, 1 or more, no leading zeros)", HeaderKeySeq, v)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("outbox: header %s value %q is not a sequence number: %w", HeaderKeySeq, v, errors.Unwrap(err))
	}
	return n, nil
}

// KeySeq returns the entry's per-key sequence number from its
// [HeaderKeySeq] header, and false when it has none or the value does not
// parse.
func (e Entry) KeySeq() (int64, bool) {
	v, ok := e.Headers[HeaderKeySeq]
	if !ok {
		return 0, false
	}
	n, err := ParseKeySeq(v)
	return n, err == nil
}
