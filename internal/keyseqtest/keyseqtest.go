// Package keyseqtest holds what the backends' tests share to run the
// conformance suite with per-key sequence numbers on: the suite compares
// the headers it reads back with those it appended, so the header the
// option adds is checked and removed on the way.
package keyseqtest

import (
	"fmt"
	"maps"
	"slices"

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

// StripInfos applies strip (a backend's use of Strip) to the entries of
// exported infos, in place.
func StripInfos(infos []outbox.EntryInfo, strip func([]outbox.Entry) error) error {
	for i := range infos {
		es := []outbox.Entry{infos[i].Entry}
		if err := strip(es); err != nil {
			return err
		}
		infos[i].Entry = es[0]
	}
	return nil
}

// StripBlocked applies strip to the head entry of each blocked key, in
// place.
func StripBlocked(keys []outbox.BlockedKey, strip func([]outbox.Entry) error) error {
	for i := range keys {
		es := []outbox.Entry{keys[i].Head.Entry}
		if err := strip(es); err != nil {
			return err
		}
		keys[i].Head.Entry = es[0]
	}
	return nil
}

// NumberImports returns a copy of infos in which each keyed entry without
// an outbox.HeaderKeySeq header has one ("1"): the header an entry
// exported from a numbering outbox carries. Import keeps headers as they
// were and numbers nothing, so without it the stripping reads would find
// a keyed entry without a number.
func NumberImports(infos []outbox.EntryInfo) []outbox.EntryInfo {
	out := slices.Clone(infos)
	for i := range out {
		if out[i].Key == "" {
			continue
		}
		if _, ok := out[i].Headers[outbox.HeaderKeySeq]; !ok {
			h := maps.Clone(out[i].Headers)
			if h == nil {
				h = map[string]string{}
			}
			h[outbox.HeaderKeySeq] = "1"
			out[i].Headers = h
		}
	}
	return out
}
