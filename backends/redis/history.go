package redisoutbox

import (
	"encoding/binary"
	"time"

	"github.com/outboxrelay/outbox"
)

// History values: the field of an entry's ID in its partition's history
// hash ("{prefix:N}:history"), written by mark_failed.lua (see "History"
// in lib.lua) and read by decodeHistory:
//
//	off  size  field
//	0    1     version (1)
//	1    1     flags: historyDeferred
//	2    ...   the attempts, oldest first, each:
//	           8  at, Unix ms, server clock
//	           4  owner length, then owner
//	           4  error length, then error
//
// An entry has a field only once it was attempted or deferred; MarkSent
// and Cancel delete it with the entry, Requeue keeps the attempts and
// clears the flag, a park keeps the attempts and clears the flag.
const (
	historyV1       = 1
	historyDeferred = 1
)

// decodeHistory decodes a history value: the attempts (nil when none)
// and whether the entry is flagged deferred. A value of another version
// reads as no history; a truncated attempt ends it.
func decodeHistory(h string) (attempts []outbox.Attempt, deferred bool) {
	if len(h) < 2 || h[0] != historyV1 {
		return nil, false
	}
	deferred = h[1]&historyDeferred != 0
	b := []byte(h[2:])
	for len(b) >= 12 {
		at := int64(binary.BigEndian.Uint64(b))
		ol := int(binary.BigEndian.Uint32(b[8:]))
		if len(b) < 12+ol+4 {
			break
		}
		owner := string(b[12 : 12+ol])
		el := int(binary.BigEndian.Uint32(b[12+ol:]))
		rest := b[16+ol:]
		if len(rest) < el {
			break
		}
		attempts = append(attempts, outbox.Attempt{At: time.UnixMilli(at), Owner: owner, Error: string(rest[:el])})
		b = rest[el:]
	}
	return attempts, deferred
}

// encodeHistory encodes attempts (the last outbox.MaxAttemptHistory of
// them) and the deferred flag as a history value; "" when there is
// neither (no field). Import writes it.
func encodeHistory(attempts []outbox.Attempt, deferred bool) string {
	if len(attempts) > outbox.MaxAttemptHistory {
		attempts = attempts[len(attempts)-outbox.MaxAttemptHistory:]
	}
	if len(attempts) == 0 && !deferred {
		return ""
	}
	b := []byte{historyV1, 0}
	if deferred {
		b[1] = historyDeferred
	}
	for _, a := range attempts {
		b = binary.BigEndian.AppendUint64(b, uint64(a.At.UnixMilli()))
		b = appendString(b, a.Owner)
		b = appendString(b, a.Error)
	}
	return string(b)
}
