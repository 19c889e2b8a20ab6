package redisoutbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// corruption damages a stored format 2 value of a pending, never attempted
// entry: it returns the new value. salvage says which of key and topic the
// claim can still read, want a part of the reason it gives.
type corruption struct {
	name   string
	damage func(v []byte) []byte
	key    bool // the key is still readable
	topic  bool // the topic is still readable
	want   string
}

// fieldAt returns the offset of the key's length field in v (format 2).
func fieldAt(v []byte) int {
	return fixedHeaderLen + int(binary.BigEndian.Uint32(v[29:33]))
}

// topicAt returns the offset of the topic's length field in v.
func topicAt(v []byte) int {
	at := fieldAt(v)
	return at + 4 + int(binary.BigEndian.Uint32(v[at:]))
}

// nbAt returns the offset of the not-before field in v.
func nbAt(v []byte) int {
	at := topicAt(v)
	return at + 4 + int(binary.BigEndian.Uint32(v[at:]))
}

func setU32(v []byte, at int, n uint32) []byte {
	c := append([]byte(nil), v...)
	binary.BigEndian.PutUint32(c[at:], n)
	return c
}

// corruptions are the ways a stored entry's value can be damaged by hand:
// each part of format 2 in turn (the entry needs a key, a topic and one
// header for all of them to apply).
var corruptions = []corruption{
	{"empty value", func([]byte) []byte { return nil }, false, false, "empty value"},
	{"unknown format version", func(v []byte) []byte { return append([]byte{7}, v[1:]...) }, false, false, "unknown format version 7"},
	{"truncated in sequence", func(v []byte) []byte { return v[:5] }, false, false, "truncated sequence"},
	{"truncated in created-at", func(v []byte) []byte { return v[:12] }, false, false, "truncated created-at"},
	{"truncated in position", func(v []byte) []byte { return v[:20] }, false, false, "truncated position"},
	{"truncated in attempts", func(v []byte) []byte { return v[:27] }, false, false, "truncated attempts"},
	{"truncated value", func(v []byte) []byte { return v[:31] }, false, false, "truncated last error length"},
	{"last error length past the end", func(v []byte) []byte { return setU32(v, 29, 1<<30) }, false, false, "last error longer than the value"},
	{"truncated in key length", func(v []byte) []byte { return v[:fieldAt(v)+2] }, false, false, "truncated key length"},
	{"key length past the end", func(v []byte) []byte { return setU32(v, fieldAt(v), 1<<30) }, false, false, "key longer than the value"},
	{"truncated in topic length", func(v []byte) []byte { return v[:topicAt(v)+2] }, true, false, "truncated topic length"},
	{"topic length past the end", func(v []byte) []byte { return setU32(v, topicAt(v), 1<<30) }, true, false, "topic longer than the value"},
	{"empty topic", func(v []byte) []byte {
		at := topicAt(v)
		n := int(binary.BigEndian.Uint32(v[at:]))
		c := append([]byte(nil), v[:at]...)
		c = binary.BigEndian.AppendUint32(c, 0)
		return append(c, v[at+4+n:]...)
	}, true, true, "topic is empty"},
	{"truncated in not-before", func(v []byte) []byte { return v[:nbAt(v)+3] }, true, true, "truncated not-before"},
	{"truncated in header count", func(v []byte) []byte { return v[:nbAt(v)+10] }, true, true, "truncated header count"},
	{"header count past the end", func(v []byte) []byte { return setU32(v, nbAt(v)+8, 1<<30) }, true, true, "header count larger than the value"},
	{"header name past the end", func(v []byte) []byte { return setU32(v, nbAt(v)+12, 1<<30) }, true, true, "header name longer than the value"},
	{"header value past the end", func(v []byte) []byte {
		at := nbAt(v) + 12
		at += 4 + int(binary.BigEndian.Uint32(v[at:]))
		return setU32(v, at, 1<<30)
	}, true, true, "header value longer than the value"},
}

func corruptionNamed(how string) (corruption, bool) {
	for _, c := range corruptions {
		if c.name == how {
			return c, true
		}
	}
	return corruption{}, false
}

// corrupt damages the stored value of entry id (in whichever partition
// holds it) in the named way, writing the hash field by hand with HSET.
func corrupt(ctx context.Context, c redis.UniversalClient, b *Backend, id, how string) error {
	cr, ok := corruptionNamed(how)
	if !ok {
		return fmt.Errorf("unknown corruption %q", how)
	}
	for _, k := range b.parts {
		v, err := c.HGet(ctx, k.entries, id).Bytes()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return err
		}
		if len(v) < fixedHeaderLen || v[0] != encodingV2 {
			return fmt.Errorf("entry %q is not a format 2 value", id)
		}
		if e, err := decodeEntry(id, 0, v); err != nil || len(e.Headers) == 0 && strings.Contains(how, "header ") {
			return fmt.Errorf("entry %q needs a header for %q (decode: %v)", id, how, err)
		}
		return c.HSet(ctx, k.entries, id, cr.damage(v)).Err()
	}
	return fmt.Errorf("no partition holds entry %q: %w", id, outbox.ErrNotFound)
}

func TestCorruptEntries(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			for _, cr := range corruptions {
				t.Run(strings.ReplaceAll(cr.name, " ", "_"), func(t *testing.T) { t.Parallel(); testCorruption(t, c, cr) })
			}
			t.Run("StrayPendingMemberIsRemoved", func(t *testing.T) { t.Parallel(); testStrayMember(t, c) })
			t.Run("WrongSequenceIsParkedAndRequeueable", func(t *testing.T) { t.Parallel(); testWrongSequence(t, c) })
			t.Run("QuarantinedValueInPendingIsParkedAgain", func(t *testing.T) { t.Parallel(); testQuarantinedInPending(t, c) })
			t.Run("GarbageMembersShowNoLag", func(t *testing.T) { t.Parallel(); testGarbageMembersStats(t, c) })
			t.Run("GarbageKeyOrderMember", func(t *testing.T) { t.Parallel(); testGarbageKeyOrder(t, c) })
			t.Run("GarbageParkedMember", func(t *testing.T) { t.Parallel(); testGarbageParked(t, c) })
			t.Run("RequeueRefusesAndRequeuesOthers", func(t *testing.T) { t.Parallel(); testRequeueRefuses(t, c) })
		})
	}
}

// testCorruption: a corrupt entry between two good ones of its key is
// parked and reported once with what could be read, the good ones are
// delivered in order in the same batch, the admin calls show it, and
// Requeue refuses it.
func testCorruption(t *testing.T, c redis.UniversalClient, cr corruption) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	key := keyFor(t, 1, 2)
	h := map[string]string{"h": "v"}
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "a", Topic: "t", Key: key, Headers: h},
		outbox.Entry{ID: "bad", Topic: "topic", Key: key, Headers: h, Payload: []byte("p")},
		outbox.Entry{ID: "c", Topic: "t", Key: key, Headers: h}))
	before, err := c.HGet(ctx, b.parts[1].entries, "bad").Result()
	require.NoError(t, err)
	require.NoError(t, corrupt(ctx, c, b, "bad", cr.name))
	raw, err := c.HGet(ctx, b.parts[1].entries, "bad").Result()
	require.NoError(t, err)
	require.NotEqual(t, before, raw)

	l, err := b.AcquireLease(ctx, 1, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "c"}, ids(batch.Entries), "the corrupt entry neither stalls nor holds back its key")
	require.Len(t, batch.Parked, 1)
	p := batch.Parked[0]
	assert.Equal(t, "bad", p.ID)
	assert.Contains(t, p.Reason, cr.want, "the reason names the field")
	if _, derr := decodeEntry("bad", 1, []byte(raw)); derr != nil {
		why := strings.TrimPrefix(derr.Error(), errCorrupt.Error()+": ")
		assert.Contains(t, p.Reason, why, "claim.lua and decodeEntry give the same reason")
	}
	assert.Contains(t, p.Reason, "corrupt stored entry")
	wantKey, wantTopic := "", ""
	if cr.key {
		wantKey = key
	}
	if cr.topic && cr.name != "empty topic" {
		wantTopic = "topic"
	}
	assert.Equal(t, wantKey, p.Key, "salvaged key")
	assert.Equal(t, wantTopic, p.Topic, "salvaged topic")
	require.NoError(t, b.MarkSent(ctx, l, ids(batch.Entries)))

	again, err := b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Empty(t, again.Entries)
	assert.Empty(t, again.Parked, "a park is reported once")

	parked, err := b.Parked(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, parked, 1)
	assert.Equal(t, p.Reason, parked[0].LastError)
	assert.Equal(t, wantKey, parked[0].Key)
	assert.Equal(t, wantTopic, parked[0].Topic)
	assert.Equal(t, 1, parked[0].Partition)
	assert.Equal(t, 1, parked[0].Attempts)
	assert.Equal(t, raw, string(parked[0].Payload), "the raw value is kept")
	info, err := b.Lookup(ctx, "bad")
	require.NoError(t, err)
	assert.True(t, info.Parked)
	assert.Equal(t, p.Reason, info.LastError)
	assert.Equal(t, wantKey, info.Key)

	n, err := b.Requeue(ctx, "bad")
	assert.Equal(t, 0, n)
	require.ErrorIs(t, err, outbox.ErrNotRequeueable)
	var rerr *outbox.RequeueRefusedError
	require.ErrorAs(t, err, &rerr)
	require.Len(t, rerr.Refused, 1)
	assert.Equal(t, "bad", rerr.Refused[0].ID)
	assert.Contains(t, rerr.Refused[0].Reason, "quarantined")
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Stats{Parked: 1}, st)
	require.NoError(t, b.Cancel(ctx, "bad"))
}

// A pending member with a wrong sequence next to the entry's own member is
// removed; the entry is delivered once, unharmed.
func testStrayMember(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x", Topic: "t", Key: "k"}, outbox.Entry{ID: "y", Topic: "t", Key: "k"}))
	require.NoError(t, c.ZAdd(ctx, b.parts[0].pending, redis.Z{Score: 0, Member: "\x00\x00\x00\x00\x00\x00\x00\x63y"}).Err())
	require.NoError(t, c.ZAdd(ctx, b.parts[0].pending, redis.Z{Score: 0, Member: "garbage-without-entry"}).Err())
	require.NoError(t, c.ZAdd(ctx, b.parts[0].pending, redis.Z{Score: 0, Member: "x"}).Err())
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"x", "y"}, ids(batch.Entries))
	assert.Empty(t, batch.Parked)
	n, err := c.ZCard(ctx, b.parts[0].pending).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "the stray members are gone")
}

// A value whose only pending member has another sequence is parked as it
// is (the value is sound) and can be requeued.
func testWrongSequence(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x", Topic: "t", Key: "k"}, outbox.Entry{ID: "y", Topic: "t", Key: "k"}))
	v, err := c.HGet(ctx, b.parts[0].entries, "x").Result()
	require.NoError(t, err)
	require.NoError(t, c.ZRem(ctx, b.parts[0].pending, v[1:9]+"x").Err())
	require.NoError(t, c.ZAdd(ctx, b.parts[0].pending, redis.Z{Score: 0, Member: "\x00\x00\x00\x00\x00\x00\x00\x63x"}).Err())
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"y"}, ids(batch.Entries))
	require.Len(t, batch.Parked, 1)
	assert.Equal(t, outbox.CorruptEntry{ID: "x", Key: "k", Topic: "t", Reason: batch.Parked[0].Reason}, batch.Parked[0])
	assert.Contains(t, batch.Parked[0].Reason, "sequence 99")
	require.NoError(t, b.MarkSent(ctx, l, []string{"y"}))
	n, err := b.Requeue(ctx, "x")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	batch, err = b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"x"}, ids(batch.Entries))
}

// A quarantined value moved back to pending by hand is parked again, as it
// is, and reported with its reason.
func testQuarantinedInPending(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x", Topic: "t", Key: "k"}))
	require.NoError(t, corrupt(ctx, c, b, "x", "empty topic"))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Len(t, batch.Parked, 1)
	v, err := c.HGet(ctx, b.parts[0].entries, "x").Result()
	require.NoError(t, err)
	require.Equal(t, byte(encodingQuarantined), v[0])
	require.NoError(t, c.ZRem(ctx, b.parts[0].parked, "x").Err())
	require.NoError(t, c.ZAdd(ctx, b.parts[0].pending, redis.Z{Score: 0, Member: v[1:9] + "x"}).Err())
	again, err := b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Empty(t, again.Entries)
	assert.Equal(t, batch.Parked, again.Parked)
	v2, err := c.HGet(ctx, b.parts[0].entries, "x").Result()
	require.NoError(t, err)
	assert.Equal(t, v, v2, "parked again as it is")
}

// Garbage pending members (score 0, no entry) show no lag since 1970 and
// are not counted.
func testGarbageMembersStats(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x", Topic: "t", Key: keyFor(t, 0, 2)}))
	for _, m := range []string{"garbage", "", "12345678nope", "\x00\x00\x00\x00\x00\x00\x00\x63x"} {
		require.NoError(t, c.ZAdd(ctx, b.parts[0].pending, redis.Z{Score: 0, Member: m}).Err())
	}
	require.NoError(t, c.ZAdd(ctx, b.parts[1].pending, redis.Z{Score: 5, Member: "only-garbage"}).Err())
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Pending)
	assert.Equal(t, int64(1), st.Due)
	require.False(t, st.OldestDue.IsZero())
	assert.WithinDuration(t, time.Now(), st.OldestDue, time.Minute, "no lag since 1970")
	ps, err := b.PartitionStats(ctx)
	require.NoError(t, err)
	assert.True(t, ps[1].OldestDue.IsZero())
	assert.Equal(t, int64(0), ps[1].Pending)

	// More than stats.lua looks at: bounded, and the lag is that of a
	// member past them (still garbage here: the call stays bounded).
	z := make([]redis.Z, 150)
	for i := range z {
		z[i] = redis.Z{Score: float64(1000 + i), Member: fmt.Sprintf("g%03d", i)}
	}
	require.NoError(t, c.ZAdd(ctx, b.parts[1].pending, z...).Err())
	ps, err = b.PartitionStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1099), ps[1].OldestDue.UnixMilli(), "the 101st due member: only-garbage and g000..g098 were looked at")
}

// A key-order member too short to be one, in the range of a key, is
// removed rather than failing the claim.
func testGarbageKeyOrder(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x", Topic: "t", Key: "k"}))
	pfx := "\x00\x00\x00\x01k"
	for _, m := range []string{pfx, pfx + "short", "unrelated"} {
		require.NoError(t, c.ZAdd(ctx, b.parts[0].keyorder, redis.Z{Score: 0, Member: m}).Err())
	}
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"x"}, ids(batch.Entries))
	ms, err := c.ZRange(ctx, b.parts[0].keyorder, 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"unrelated"}, ms, "members of other prefixes are never read")
}

// A parked member without an entry is skipped by Parked, counted by Stats,
// and removed by Requeue of its ID.
func testGarbageParked(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, c.ZAdd(ctx, b.parts[0].parked, redis.Z{Score: 0, Member: "ghost"}).Err())
	parked, err := b.Parked(ctx, "", 10)
	require.NoError(t, err)
	assert.Empty(t, parked)
	_, err = b.Lookup(ctx, "ghost")
	assert.ErrorIs(t, err, outbox.ErrNotFound)
	n, err := b.Requeue(ctx, "ghost")
	require.NoError(t, err)
	assert.Equal(t, 0, n)
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Parked)
}

// Requeue refuses the entries that can never be published (quarantined,
// undecodable, no topic) in the order given and requeues the others.
func testRequeueRefuses(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 3})
	var all []outbox.Entry
	for i, id := range []string{"ok1", "quar", "ok2", "notopic", "undecodable"} {
		all = append(all, outbox.Entry{ID: id, Topic: "t", Key: keyFor(t, i%3, 3)})
	}
	require.NoError(t, b.Append(ctx, all...))
	require.NoError(t, corrupt(ctx, c, b, "quar", "truncated value"))
	for p := range 3 {
		l, err := b.AcquireLease(ctx, p, "me", time.Minute)
		require.NoError(t, err)
		batch, err := b.FetchBatch(ctx, l, 10)
		require.NoError(t, err)
		var fs []outbox.Failure
		for _, e := range batch.Entries {
			fs = append(fs, outbox.Failure{ID: e.ID, Park: true, Error: "sink said no"})
		}
		require.NoError(t, b.MarkFailed(ctx, l, fs))
	}
	// Damage two parked entries by hand: no topic, and a cut value.
	for _, id := range []string{"notopic", "undecodable"} {
		how := "empty topic"
		if id == "undecodable" {
			how = "truncated value"
		}
		require.NoError(t, corrupt(ctx, c, b, id, how))
	}
	n, err := b.Requeue(ctx, "undecodable", "ok1", "quar", "missing", "notopic", "ok2")
	assert.Equal(t, 2, n)
	var rerr *outbox.RequeueRefusedError
	require.ErrorAs(t, err, &rerr)
	require.ErrorIs(t, err, outbox.ErrNotRequeueable)
	require.Len(t, rerr.Refused, 3)
	assert.Equal(t, "undecodable", rerr.Refused[0].ID)
	assert.Contains(t, rerr.Refused[0].Reason, "truncated last error length")
	assert.Equal(t, "quar", rerr.Refused[1].ID)
	assert.Contains(t, rerr.Refused[1].Reason, "quarantined")
	assert.Equal(t, "notopic", rerr.Refused[2].ID)
	assert.Contains(t, rerr.Refused[2].Reason, "no topic")
	parked, err := b.Parked(ctx, "", 10)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"notopic", "quar", "undecodable"}, ids(parked))
	info, err := b.Lookup(ctx, "ok1")
	require.NoError(t, err)
	assert.False(t, info.Parked)
}

// TestQuarantine: quarantine.lua, which parks what the claim's fast path
// returned and Go's decoder refused, quarantines a malformed value as the
// claim does; a value it finds well formed (a refusal the script does not
// share) is parked by MarkFailed with the decoder's reason and its value
// unchanged; an entry no longer pending under the member the claim
// returned it under is left alone.
func TestQuarantine(t *testing.T) {
	t.Parallel()
	c := standaloneClient(t)
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 1})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "bad", Topic: "topic", Key: "k"},
		outbox.Entry{ID: "odd", Topic: "t", Key: "k2"},
		outbox.Entry{ID: "gone", Topic: "t"}))
	require.NoError(t, corrupt(ctx, c, b, "bad", "topic length past the end"))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	var pairs []any
	vals := map[string]string{}
	for _, id := range []string{"bad", "odd", "gone"} {
		v, err := c.HGet(ctx, b.parts[0].entries, id).Result()
		require.NoError(t, err)
		vals[id] = v
		pairs = append(pairs, v[1:9]+id, id)
	}
	require.NoError(t, b.MarkSent(ctx, l, []string{"gone"}))
	refused := []refusal{
		{id: "bad", e: outbox.Entry{Key: "k"}, err: fmt.Errorf("%w: topic longer than the value", errCorrupt)},
		{id: "odd", e: outbox.Entry{Key: "k2", Topic: "t"}, err: fmt.Errorf("%w: refused by this build alone", errCorrupt)},
		{id: "gone", err: fmt.Errorf("%w: refused", errCorrupt)},
	}
	parked, err := b.quarantine(ctx, "FetchBatch", l, pairs, refused)
	require.NoError(t, err)
	require.Len(t, parked, 2)
	assert.Equal(t, "bad", parked[0].ID)
	assert.Equal(t, "k", parked[0].Key)
	assert.Contains(t, parked[0].Reason, "corrupt stored entry, parked by FindPendingBatch: topic longer than the value")
	assert.Equal(t, "odd", parked[1].ID)
	assert.Equal(t, "k2", parked[1].Key)
	assert.Equal(t, "t", parked[1].Topic)
	assert.Contains(t, parked[1].Reason, "refused by this build alone (parked by FetchBatch after Go's decoder refused it; the stored value is unchanged)")

	all, err := b.Parked(ctx, "", 10)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"bad", "odd"}, ids(all))
	for _, e := range all {
		switch e.ID {
		case "bad":
			assert.Equal(t, vals["bad"], string(e.Payload), "quarantined: the raw value is the payload")
		case "odd":
			raw, err := c.HGet(ctx, b.parts[0].entries, "odd").Result()
			require.NoError(t, err)
			assert.Equal(t, vals["odd"][17:25], raw[17:25], "the value is unchanged but for its failure")
		}
	}
	_, err = b.Lookup(ctx, "gone")
	assert.ErrorIs(t, err, outbox.ErrNotFound, "an entry sent meanwhile is left alone")

	lost := l
	lost.Version++
	_, err = b.quarantine(ctx, "FetchBatch", lost, pairs[:2], refused[:1])
	assert.ErrorIs(t, err, outbox.ErrLeaseLost)
}
