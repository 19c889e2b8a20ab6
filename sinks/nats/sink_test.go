package natssink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// TestPublishCarriesEverything: every entry is stored in the stream on its
// topic's subject, in order per key, with its ID (Nats-Msg-Id and the ID
// header), key header, payload and headers, on both servers.
func TestPublishCarriesEverything(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			url := tg.url(t)
			sfx := suffix()
			subj := "carry." + sfx
			nc := connect(t, url)
			st := newStream(t, nc, "CARRY_"+sfx, []string{subj})
			sink, err := natssink.Dial(url, natssink.Options{})
			require.NoError(t, err)
			defer sink.Close()

			msgs := []outbox.Entry{
				{ID: "a1", Topic: subj, Key: "a", Payload: []byte("p-a1"), Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", outbox.HeaderKeySeq: "1"}},
				{ID: "b1", Topic: subj, Key: "b", Payload: []byte("p-b1")},
				{ID: "a2", Topic: subj, Key: "a", Payload: []byte("p-a2"), Headers: map[string]string{outbox.HeaderKeySeq: "2"}},
				{ID: "n1", Topic: subj, Payload: nil},
				{ID: "a3", Topic: subj, Key: "a", Payload: []byte("p-a3"), Headers: map[string]string{natssink.DefaultIDHeader: "forged"}},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i, err := range sink.Publish(ctx, msgs) {
				require.NoError(t, err, "entry %d", i)
			}
			got := readAll(t, st)
			require.Len(t, got, len(msgs))
			byID := map[string]int{}
			for seq, m := range got {
				id := m.Header.Get(natssink.DefaultIDHeader)
				byID[id] = seq
				require.Equal(t, id, m.Header.Get("Nats-Msg-Id"), "Nats-Msg-Id is the entry ID")
				require.Equal(t, subj, m.Subject)
			}
			for _, e := range msgs {
				seq, ok := byID[e.ID]
				require.True(t, ok, "entry %s stored", e.ID)
				m := got[seq]
				require.Equal(t, string(e.Payload), string(m.Data), e.ID)
				require.Equal(t, e.Key, m.Header.Get(natssink.DefaultKeyHeader), e.ID)
				if e.Key == "" {
					require.NotContains(t, m.Header, natssink.DefaultKeyHeader)
				}
				for k, v := range e.Headers {
					if k == natssink.DefaultIDHeader {
						continue
					}
					require.Equal(t, v, m.Header.Get(k), "%s header %s", e.ID, k)
				}
			}
			require.Less(t, byID["a1"], byID["a2"])
			require.Less(t, byID["a2"], byID["a3"])
			require.Equal(t, []string{"a3"}, got[byID["a3"]].Header.Values(natssink.DefaultIDHeader), "an entry header cannot forge the ID header")
		})
	}
}

// TestEntriesNATSCannotCarry: an entry whose ID or key has a line break
// fails permanently, naming the header, and is not published; its
// neighbours are.
func TestEntriesNATSCannotCarry(t *testing.T) {
	t.Parallel()
	url := embeddedURL(t)
	sfx := suffix()
	subj := "carrynot." + sfx
	st := newStream(t, connect(t, url), "CARRYNOT_"+sfx, []string{subj})
	sink, err := natssink.Dial(url, natssink.Options{})
	require.NoError(t, err)
	defer sink.Close()
	errs := sink.Publish(context.Background(), []outbox.Entry{
		{ID: "bad\r\nid", Topic: subj},
		{ID: "ok1", Topic: subj},
		{ID: "badkey", Topic: subj, Key: "a\nb"},
	})
	require.Equal(t, backoff.ClassPermanent, backoff.ClassOf(errs[0]), "%v", errs[0])
	require.ErrorContains(t, errs[0], "outbox-id")
	require.NoError(t, errs[1])
	require.Equal(t, backoff.ClassPermanent, backoff.ClassOf(errs[2]), "%v", errs[2])
	require.ErrorContains(t, errs[2], "outbox-key")
	require.Equal(t, []string{"ok1"}, ids(readAll(t, st)))
}
