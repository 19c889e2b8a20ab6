package redisinbox

import (
	"strconv"
	"strings"
)

// This file names every Redis key the inbox uses (see "# Keys" in doc.go)
// and encodes the offsets hash's fields. Nothing else builds a key name.

// keys are an inbox's key names for one prefix; they share its hash tag.
type keys struct {
	prefix  string // Options.Prefix
	tag     string // the prefix's hash tag, braces included: "{inbox}"
	anchor  string // never written: the key a transaction picks its node by (WATCHed through a Ring)
	ids     string // zset: ID -> ms it was recorded at (what Purge reads)
	seqs    string // zset: message key -> ms its number was last set at
	offsets string // hash: offsetField(group, topic, partition) -> next offset
}

func newKeys(prefix string) keys {
	i, j := strings.IndexByte(prefix, '{'), strings.IndexByte(prefix, '}')
	return keys{
		prefix:  prefix,
		tag:     prefix[i : j+1],
		anchor:  prefix + ":anchor",
		ids:     prefix + ":ids",
		seqs:    prefix + ":seqs",
		offsets: prefix + ":offsets",
	}
}

// id is the string key recording one applied ID: its value is the ms the
// transaction recorded it at.
func (k keys) id(id string) string { return k.prefix + ":id:" + id }

// seq is the string key holding a message key's highest applied sequence
// number, in decimal.
func (k keys) seq(key string) string { return k.prefix + ":seq:" + key }

// tagOf returns the hash tag Redis Cluster hashes key by, braces included
// ("a:{x}:b" -> "{x}"), or "" when it has none (the whole key is hashed).
func tagOf(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return key[i : i+j+2]
}

// offsetFieldPrefix is the start of the offsets hash's fields of one
// consumer group and topic: each length-prefixed, so no group or topic
// name (colons, digits and all) can be read as another's:
// "<len(group)>:<group><len(topic)>:<topic>:".
func offsetFieldPrefix(group, topic string) string {
	return strconv.Itoa(len(group)) + ":" + group + strconv.Itoa(len(topic)) + ":" + topic + ":"
}

// offsetField is the offsets hash's field of one partition: the prefix
// above, then the partition number in decimal.
func offsetField(group, topic string, partition int32) string {
	return offsetFieldPrefix(group, topic) + strconv.FormatInt(int64(partition), 10)
}

// offsetPartition reads the partition number of field if field is one of
// group and topic's (it starts with their prefix, then holds a number and
// nothing else).
func offsetPartition(field, group, topic string) (int32, bool) {
	rest, ok := strings.CutPrefix(field, offsetFieldPrefix(group, topic))
	if !ok {
		return 0, false
	}
	p, err := strconv.ParseInt(rest, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(p), true
}

// slotOf returns the Redis Cluster slot of a key whose hash tag is tag
// (braces included): CRC16 (XMODEM) of the tag's content, modulo 16384.
func slotOf(tag string) int {
	var crc uint16
	for _, b := range []byte(tag[1 : len(tag)-1]) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
