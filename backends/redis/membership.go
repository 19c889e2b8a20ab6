package redisoutbox

import (
	"context"
	"encoding/binary"
	"sort"
	"time"

	"github.com/outboxrelay/outbox"
)

// memberRecordV1 is the version byte of a membership record: version (1)
// | expiry ms (8) | max partitions (4) | partitions (4 each), big-endian.
// heartbeat.lua writes the version and the expiry, Go the rest.
const memberRecordV1 = 1

// Heartbeat runs heartbeat.lua (one round trip) on the outbox's members
// hash (the key "<Prefix>:members", in the prefix's own slot): it replaces
// m.Owner's record with one that expires ttl (rounded up to the ms) after
// the server's TIME, deletes expired records (at most 100 per call; later
// calls delete the rest) and returns the live members, m included, sorted
// by Owner (byte order), with Expires from the server's clock. m.Expires is
// ignored and m.Partitions is not retained; the returned slices are the
// caller's. Arguments are checked with [outbox.CheckMember] (errors wrap
// [outbox.ErrInvalidArgument]). A record this build cannot read (written
// by a later build) is left out of the result until it expires. Safe for
// concurrent use; after Close it returns [outbox.ErrClosed]; context errors
// pass through unwrapped.
func (b *Backend) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if err := outbox.CheckMember(len(b.parts), m, ttl); err != nil {
		return nil, argErr("Heartbeat", err)
	}
	body := make([]byte, 0, 4+4*len(m.Partitions))
	body = binary.BigEndian.AppendUint32(body, uint32(m.MaxPartitions))
	for _, p := range m.Partitions {
		body = binary.BigEndian.AppendUint32(body, uint32(p))
	}
	flat, err := scriptHeartbeat.Run(ctx, b.client, []string{b.members}, m.Owner, ttlMillis(ttl), body).Slice()
	if err != nil {
		return nil, b.mapErr(ctx, "Heartbeat", err, b.members)
	}
	out := make([]outbox.Member, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		owner, _ := flat[i].(string)
		rec, _ := flat[i+1].(string)
		if mem, ok := decodeMember(owner, rec); ok {
			out = append(out, mem)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Owner < out[j].Owner })
	return out, nil
}

// decodeMember decodes a membership record; ok is false for a record of
// another version or a malformed one.
func decodeMember(owner, rec string) (outbox.Member, bool) {
	if len(rec) < 13 || rec[0] != memberRecordV1 || (len(rec)-13)%4 != 0 {
		return outbox.Member{}, false
	}
	r := []byte(rec)
	m := outbox.Member{
		Owner:         owner,
		Expires:       time.UnixMilli(int64(binary.BigEndian.Uint64(r[1:]))),
		MaxPartitions: int(binary.BigEndian.Uint32(r[9:])),
	}
	if n := (len(r) - 13) / 4; n > 0 {
		m.Partitions = make([]int, n)
		for i := range n {
			m.Partitions[i] = int(binary.BigEndian.Uint32(r[13+4*i:]))
		}
	}
	return m, true
}

// Leave runs leave.lua (one round trip): it deletes the record of owner
// from the members hash, so the other relays stop counting it at once.
// Leaving twice, or without a record, is a no-op that returns nil; an
// empty owner has no record (Heartbeat refuses it), so it returns nil
// without a round trip. Safe for concurrent use; after Close it returns
// [outbox.ErrClosed]; context errors pass through unwrapped.
func (b *Backend) Leave(ctx context.Context, owner string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if owner == "" {
		return nil
	}
	if err := scriptLeave.Run(ctx, b.client, []string{b.members}, owner).Err(); err != nil {
		return b.mapErr(ctx, "Leave", err, b.members)
	}
	return nil
}
