package redisoutbox

import (
	"strconv"
	"strings"
)

// This file names every Redis key and pub/sub channel the backend uses:
// keyNames lists them (suffix, type, what each holds), partitionKeys and
// outboxKeys build them from Options.Prefix, and prefixOfKey reads the
// prefix back out of a partition key. Nothing else builds a key name.

// keyName is one of the outbox's key names: the suffix it gets after the
// prefix (with the partition number in the hash tag for a partition's
// keys), its Redis type, what it holds, and whether it is a counter (a
// string that holds an integer).
type keyName struct {
	suffix, typ, holds string
	counter            bool
}

// The outbox's key names. A partition's keys share its hash tag
// ("{outbox:3}"); meta and members are in the prefix's own tag.
var (
	keyEntries    = keyName{":entries", "hash", "the partition's entries", false}
	keyPending    = keyName{":pending", "zset", "the partition's pending entries", false}
	keyInflight   = keyName{":inflight", "zset", "claims of builds before v0.2", false}
	keyParked     = keyName{":parked", "zset", "the partition's parked entries", false}
	keyParkedAt   = keyName{":parkedat", "zset", "the partition's parked entries by park time", false}
	keyKeyOrder   = keyName{":keyorder", "zset", "the partition's key order", false}
	keyLeaseVer   = keyName{":leasever", "string", "the partition's lease version counter", true}
	keyLease      = keyName{":lease", "string", "the partition's lease", false}
	keySeq        = keyName{":seq", "string", "the partition's append sequence counter", true}
	keyKeySeq     = keyName{":keyseq", "hash", "the partition's per-key sequence numbers (Options.KeySequence)", false}
	keyHold       = keyName{":hold", "hash", "the partition's hold (Holder)", false}
	keySealed     = keyName{":sealed", "string", "the partition's seal (Sealer)", false}
	keyExport     = keyName{":export", "list", "ExportBatch's scratch list", false}
	keyHistory    = keyName{":history", "hash", "the partition's attempt histories and deferrals", false}
	keyPaused     = keyName{":paused", "hash", "the pauses the partition's claim obeys (Pauser)", false}
	keyMeta       = keyName{":meta", "hash", "the outbox's partition count", false}
	keyMembers    = keyName{":members", "hash", "the relays' membership records", false}
	keyMemberInfo = keyName{":memberinfo", "hash", "the relays' host, version, start and last heartbeat", false}
	keyPauses     = keyName{":pauses", "hash", "the outbox's pauses, with their Since (Pauser)", false}
	// chanNotify is the partition's sharded pub/sub channel of wake-ups:
	// not a key, so no type.
	chanNotify = keyName{":notify", "", "the partition's wake-ups", false}

	// keyNames are the keys (not the channel), for keyKind.
	keyNames = []keyName{keyEntries, keyPending, keyInflight, keyParked, keyParkedAt, keyKeyOrder, keyLeaseVer,
		keyLease, keySeq, keyKeySeq, keyHold, keySealed, keyExport, keyHistory, keyPaused, keyMeta, keyMembers, keyMemberInfo, keyPauses}
)

// keys are the Redis keys of one partition; they share one hash tag.
type keys struct {
	tag      string // "{outbox:3}"
	entries  string // hash: entry ID -> encoded entry
	pending  string // zset: member seq8+ID, score = next attempt time in ms
	inflight string // zset of builds before v0.2 (claimed entries); acquire.lua empties it
	parked   string // zset: parked entry IDs, score 0 (pages by ID)
	parkedat string // zset: parked entry IDs, score = park time in ms (PurgeParked)
	keyorder string // zset, scores 0: key-length|key|position|seq|ID per keyed entry
	lease    string // string "version:owner" with a PX expiry
	leasever string // counter: last lease version granted
	seq      string // counter: last append sequence
	keyseq   string // hash: entry key -> last key sequence number (Options.KeySequence)
	hold     string // hash: since, next, last while the outbox is held (Holder)
	sealed   string // string "1" while the outbox is sealed (Sealer)
	export   string // list: ExportBatch's scratch key, deleted by the script that writes it
	history  string // hash: entry ID -> attempt history and deferral (see history in lib.lua)
	paused   string // hash: paused topic -> since ms; field "" while the partition is paused
	notify   string // sharded pub/sub channel of the partition's wake-ups (not a key)
}

// partitionKeys returns the keys of partition p of the outbox at prefix
// (validated: one hash tag): the tag gets ":p", so "app:{orders}:x" gives
// "app:{orders:3}:x:entries" and so on.
func partitionKeys(prefix string, p int) keys {
	i, j := strings.IndexByte(prefix, '{'), strings.IndexByte(prefix, '}')
	tag := prefix[i:j] + ":" + strconv.Itoa(p) + "}"
	base := prefix[:i] + tag + prefix[j+1:]
	return keys{
		tag:      tag,
		entries:  base + keyEntries.suffix,
		pending:  base + keyPending.suffix,
		inflight: base + keyInflight.suffix,
		parked:   base + keyParked.suffix,
		parkedat: base + keyParkedAt.suffix,
		keyorder: base + keyKeyOrder.suffix,
		lease:    base + keyLease.suffix,
		leasever: base + keyLeaseVer.suffix,
		seq:      base + keySeq.suffix,
		keyseq:   base + keyKeySeq.suffix,
		hold:     base + keyHold.suffix,
		sealed:   base + keySealed.suffix,
		export:   base + keyExport.suffix,
		history:  base + keyHistory.suffix,
		paused:   base + keyPaused.suffix,
		notify:   base + chanNotify.suffix,
	}
}

// outboxKeys returns the keys of the outbox as a whole at prefix, in the
// slot of the prefix's own tag: the meta hash (the stored partition count,
// the hold), the membership hashes (the records the relays balance by,
// and the details operators read, see membership.go) and the pauses hash
// (the record of what is paused: "t:"+topic and "p:"+partition -> since
// ms).
func outboxKeys(prefix string) (meta, members, memberInfo, pauses string) {
	return prefix + keyMeta.suffix, prefix + keyMembers.suffix, prefix + keyMemberInfo.suffix, prefix + keyPauses.suffix
}

// prefixOfKey returns the Options.Prefix of a partition key
// ("app:{orders:3}:x:entries" -> "app:{orders}:x"), "" when key is not
// one.
func prefixOfKey(key string) string {
	i, j := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
	k := strings.LastIndexByte(key, ':')
	if i < 0 || j < i || k < j {
		return ""
	}
	tag := key[i+1 : j]
	c := strings.LastIndexByte(tag, ':')
	if c < 0 {
		return ""
	}
	return key[:i+1] + tag[:c] + key[j:k]
}

// keyKind returns the name of one of the outbox's keys (by its suffix),
// and whether it is one of them.
func keyKind(key string) (keyName, bool) {
	for _, k := range keyNames {
		if strings.HasSuffix(key, k.suffix) {
			return k, true
		}
	}
	return keyName{}, false
}
