package kafkainbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

func TestMessage(t *testing.T) {
	t.Parallel()
	rec := func(headers ...string) *kgo.Record {
		r := &kgo.Record{Topic: "orders", Partition: 3, Offset: 41, Key: []byte("acct-7")}
		for i := 0; i < len(headers); i += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
		}
		return r
	}
	for name, tc := range map[string]struct {
		rec     *kgo.Record
		id      string
		seq     int64
		wantErr string
	}{
		"IDAndSeq":       {rec: rec(kafkasink.DefaultIDHeader, "e-1", outbox.HeaderKeySeq, "12"), id: "e-1", seq: 12},
		"IDOnly":         {rec: rec("traceparent", "x", kafkasink.DefaultIDHeader, "e-2"), id: "e-2"},
		"NoID":           {rec: rec(outbox.HeaderKeySeq, "1"), wantErr: "kafkainbox: record orders[3] at offset 41 has no outbox-id header"},
		"EmptyID":        {rec: rec(kafkasink.DefaultIDHeader, ""), wantErr: "has no outbox-id header"},
		"SeqNotANumber":  {rec: rec(kafkasink.DefaultIDHeader, "e-3", outbox.HeaderKeySeq, "x"), wantErr: `record orders[3] at offset 41 (entry "e-3")`},
		"SeqZero":        {rec: rec(kafkasink.DefaultIDHeader, "e-4", outbox.HeaderKeySeq, "0"), wantErr: "is not a sequence number"},
		"SeqLeadingZero": {rec: rec(kafkasink.DefaultIDHeader, "e-5", outbox.HeaderKeySeq, "07"), wantErr: "is not a sequence number"},
		"Nil":            {wantErr: "nil record"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := kafkainbox.Message(tc.rec)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, inbox.ErrInvalidMessage)
				require.ErrorContains(t, err, tc.wantErr)
				require.Equal(t, inbox.Message{}, m)
				return
			}
			require.NoError(t, err)
			require.Equal(t, inbox.Message{ID: tc.id, Key: "acct-7", Seq: tc.seq, Data: tc.rec}, m)
			require.Same(t, tc.rec, m.Data.(*kgo.Record))
		})
	}
}
