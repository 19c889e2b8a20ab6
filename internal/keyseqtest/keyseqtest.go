// Package keyseqtest holds what the backends' tests share to run the
// conformance suite with per-key sequence numbers on: the suite compares
// the headers it reads back with those it appended, so the header the
// option adds is checked and removed on the way.
package keyseqtest

import (
	"fmt"

	"github.com/outboxrelay/outbox"
)

// Strip checks the outbox.HeaderKeySeq header of each entry (a valid
// number, on keyed entries only) and removes it. With requireOnKeyed, a
// keyed entry without the header is an error too (a backend whose stored
// entries cannot be damaged by the suite's Corrupter).
func Strip(es []outbox.Entry, requireOnKeyed bool) error {
	for i := range es {
		v, ok := es[i].Headers[outbox.HeaderKeySeq]
		if !ok {
			if requireOnKeyed && es[i].Key != "" {
				return fmt.Errorf("keyseq: entry %s of key %q has no %s header", es[i].ID, es[i].Key, outbox.HeaderKeySeq)
			}
			continue
		}
		if es[i].Key == "" {
			return fmt.Errorf("keyseq: entry %s has no key but header %s = %q", es[i].ID, outbox.HeaderKeySeq, v)
		}
		if _, err := outbox.ParseKeySeq(v); err != nil {
			return fmt.Errorf("keyseq: entry %s: %w", es[i].ID, err)
		}
		delete(es[i].Headers, outbox.HeaderKeySeq)
	}
	return nil
}
