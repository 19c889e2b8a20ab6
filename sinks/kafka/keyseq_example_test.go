package kafkasink_test

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// Check the per-key sequence numbers of consumed records (appended by a
// backend with the KeySequence option): order-1's number 2 arrives twice
// (at-least-once delivery) and its number 3 never arrives (cancelled in
// the outbox, or lost). The records are made by hand here; a consumer
// passes what PollFetches returns.
func ExampleKeySeqChecker() {
	checker := kafkasink.NewKeySeqChecker(kafkasink.KeySeqCheckerOptions{MaxKeys: 10_000})
	record := func(key, seq string) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Headers: []kgo.RecordHeader{{Key: outbox.HeaderKeySeq, Value: []byte(seq)}}}
	}
	consumed := []*kgo.Record{
		record("order-1", "1"),
		record("order-2", "1"),
		record("order-1", "2"),
		record("order-1", "2"),
		record("order-2", "2"),
		record("order-1", "4"),
	}
	for _, rec := range consumed {
		switch r := checker.CheckRecord(rec); r.Status {
		case kafkasink.KeySeqDuplicate:
			fmt.Printf("%s: duplicate of number %d (last seen %d): skip it\n", r.Key, r.Seq, r.Last)
		case kafkasink.KeySeqGap:
			fmt.Printf("%s: gap: %d number(s) missing before %d\n", r.Key, r.Missing, r.Seq)
		}
	}
	st := checker.Stats()
	fmt.Printf("ok %d, duplicates %d, gaps %d (%d missing), keys %d\n", st.OK, st.Duplicates, st.Gaps, st.Missing, st.Keys)
	// Output:
	// order-1: duplicate of number 2 (last seen 2): skip it
	// order-1: gap: 1 number(s) missing before 4
	// ok 4, duplicates 1, gaps 1 (1 missing), keys 2
}
