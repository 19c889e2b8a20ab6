package redisoutbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/outboxrelay/outbox"
)

// memberRecordV1 is the version byte of a membership record: version (1)
// | expiry ms (8) | max partitions (4) | partitions (4 each), big-endian.
// heartbeat.lua writes the version and the expiry, Go the rest.
const memberRecordV1 = 1

// memberInfoV1 is the version byte of a member's info (the member info
// hash, "<Prefix>:memberinfo"): version (1) | last heartbeat ms (8) |
// started: 1 byte (0: zero time, 1: set), Unix seconds (8), nanoseconds
// (4) | host length (4), host | version length (4), version, big-endian.
// heartbeat.lua writes the version and the heartbeat time, Go the rest.
// It is kept apart from the record, whose layout builds before v0.9 read.
const memberInfoV1 = 1

// maxMemberText is how many bytes of Member.Host and Member.Version are
// stored (longer ones are cut, at a UTF-8 boundary).
const maxMemberText = 255

// Heartbeat runs heartbeat.lua (one round trip) on the outbox's members
// hash (the key "<Prefix>:members", in the prefix's own slot): it replaces
// m.Owner's record with one that expires ttl (rounded up to the ms) after
// the server's TIME, and its info (Host and Version, each cut to 255
// bytes, Started, and the server's TIME as Renewed) in the member info
// hash ("<Prefix>:memberinfo", same slot); it deletes expired records
// and their info (at most 100 per call; later calls delete the rest) and
// returns the live members, m included, sorted by Owner (byte order),
// with Expires and Renewed from the server's clock. m.Expires and
// m.Renewed are ignored and m.Partitions is not retained; the returned slices are the
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
	ks := []string{b.members, b.memberInfo}
	flat, err := scriptHeartbeat.Run(ctx, b.client, ks, m.Owner, ttlMillis(ttl), body, encodeMemberInfo(m)).Slice()
	if err != nil {
		return nil, b.mapErr(ctx, "Heartbeat", err, ks...)
	}
	return decodeMembers(flat), nil
}

// Members runs members.lua (one round trip, read-only) on the members
// hash and the member info hash: every member whose record has not
// expired by the server's clock, sorted by Owner (byte order), with the
// fields Heartbeat stored, Expires and Renewed (zero for a member whose
// relay runs a build before v0.9, which stores no info). Expired records
// are left for Heartbeat to delete. See [outbox.MemberLister].
func (b *Backend) Members(ctx context.Context) ([]outbox.Member, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	ks := []string{b.members, b.memberInfo}
	res, err := scriptMembers.Run(ctx, b.client, ks).Slice()
	if err != nil {
		return nil, b.mapErr(ctx, "Members", err, ks...)
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("redisoutbox: Members: unexpected result %v of members.lua", res)
	}
	flat, _ := res[1].([]any)
	return decodeMembers(flat), nil
}

// decodeMembers decodes the flat owner, record, info triples of
// heartbeat.lua and members.lua, sorted by Owner; records this build
// cannot read are left out.
func decodeMembers(flat []any) []outbox.Member {
	out := make([]outbox.Member, 0, len(flat)/3)
	for i := 0; i+2 < len(flat); i += 3 {
		owner, _ := flat[i].(string)
		rec, _ := flat[i+1].(string)
		info, _ := flat[i+2].(string)
		if mem, ok := decodeMember(owner, rec); ok {
			decodeMemberInfo(&mem, info)
			out = append(out, mem)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Owner < out[j].Owner })
	return out
}

// encodeMemberInfo is the body of m's info, after the version and the
// heartbeat time heartbeat.lua writes.
func encodeMemberInfo(m outbox.Member) []byte {
	host := outbox.TruncateUTF8(m.Host, maxMemberText)
	version := outbox.TruncateUTF8(m.Version, maxMemberText)
	b := make([]byte, 0, 13+8+len(host)+len(version))
	if m.Started.IsZero() {
		b = append(b, 0)
		b = binary.BigEndian.AppendUint64(b, 0)
		b = binary.BigEndian.AppendUint32(b, 0)
	} else {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, uint64(m.Started.Unix()))
		b = binary.BigEndian.AppendUint32(b, uint32(m.Started.Nanosecond()))
	}
	b = appendString(b, host)
	return appendString(b, version)
}

// decodeMemberInfo fills in m's Renewed, Started, Host and Version from
// its info; an info this build cannot read leaves them zero.
func decodeMemberInfo(m *outbox.Member, info string) {
	if len(info) < 1+8+13 || info[0] != memberInfoV1 {
		return
	}
	d := decoder{b: []byte(info), off: 1}
	renewed := int64(d.uint64("renewed"))
	set := d.bytes(1, "started flag")
	sec := int64(d.uint64("started seconds"))
	nsec := d.uint32("started nanoseconds")
	host := d.string("host")
	version := d.string("version")
	if d.err != nil {
		return
	}
	m.Renewed = time.UnixMilli(renewed)
	if set[0] == 1 {
		m.Started = time.Unix(sec, int64(nsec))
	}
	m.Host, m.Version = host, version
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
	if err := scriptLeave.Run(ctx, b.client, []string{b.members, b.memberInfo}, owner).Err(); err != nil {
		return b.mapErr(ctx, "Leave", err, b.members, b.memberInfo)
	}
	return nil
}
