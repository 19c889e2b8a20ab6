package amqpsink_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

func TestPublishCarriesIDKeyPayloadAndHeaders(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	s := dialSink(t, url, amqpsink.Options{})
	e := outbox.Entry{ID: outbox.NewID(), Topic: tp.exchange, Key: "order-7", Payload: []byte(`{"n":7}`), CreatedAt: time.Unix(1767225600, 0),
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "outbox-key-seq": "3", "outbox-id": "forged"}}
	errs := s.Publish(ctxT(t), []outbox.Entry{e})
	require.NoError(t, errs[0])
	d := tp.read(1)[0]
	require.Equal(t, e.ID, d.MessageId)
	require.Equal(t, "order-7", d.RoutingKey)
	require.Equal(t, tp.exchange, d.Exchange)
	require.Equal(t, e.Payload, d.Body)
	require.EqualValues(t, 2, d.DeliveryMode, "persistent")
	require.Equal(t, e.ID, d.Headers["outbox-id"], "the ID header carries the entry ID, not an entry header of that name")
	require.Equal(t, e.Headers["traceparent"], d.Headers["traceparent"])
	require.Equal(t, "3", d.Headers["outbox-key-seq"])
	require.True(t, e.CreatedAt.Equal(d.Timestamp), "timestamp = CreatedAt: %v", d.Timestamp)
}
