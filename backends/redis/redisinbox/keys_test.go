package redisinbox

import "testing"

func TestTagOf(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"{inbox}:id:1":     "{inbox}",
		"a:{inbox}:b":      "{inbox}",
		"a:{x}:id:{y}":     "{x}", // Cluster hashes the first tag only
		"plain":            "",
		"{}:empty":         "", // an empty tag hashes the whole key
		"{}{x}":            "",
		"open{only":        "",
		"{inbox:3}:parted": "{inbox:3}",
	} {
		if got := tagOf(key); got != want {
			t.Errorf("tagOf(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestOffsetFieldsAreUnambiguous: groups and topics whose names would run
// together in a naive "group:topic:partition" field keep their own
// partitions.
func TestOffsetFieldsAreUnambiguous(t *testing.T) {
	t.Parallel()
	type gtp struct {
		group, topic string
		partition    int32
	}
	all := []gtp{
		{"a:b", "c", 0}, {"a", "b:c", 0}, {"a", "b", 0}, {"a:b:c", "", 0}, {"", "a:b:c", 0},
		{"1", "2", 3}, {"1:2", "", 3}, {"g", "t", -1}, {"g", "t", 2147483647}, {"{x}", "}{", 7},
	}
	for _, w := range all {
		field := offsetField(w.group, w.topic, w.partition)
		for _, r := range all {
			p, ok := offsetPartition(field, r.group, r.topic)
			same := r.group == w.group && r.topic == w.topic
			if ok != same || (ok && p != w.partition) {
				t.Errorf("field %q of %+v read as group %q topic %q: partition %d, %v; want %v", field, w, r.group, r.topic, p, ok, same)
			}
		}
	}
}

func TestSlotOf(t *testing.T) {
	t.Parallel()
	// Values from CLUSTER KEYSLOT (the tag's content is what is hashed).
	for tag, want := range map[string]int{"{ibx}": 5933, "{123456789}": 12739, "{inbox}": 7080} {
		if got := slotOf(tag); got != want {
			t.Errorf("slotOf(%q) = %d, want %d", tag, got, want)
		}
	}
}
