package amqpsink_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// TestAMQPSWithTLSConfig publishes over amqps:// with the caller's TLS
// configuration (a private CA), and fails to connect without it.
func TestAMQPSWithTLSConfig(t *testing.T) {
	t.Parallel()
	n := privateNode(t)
	tp := newTopo(t, n.URL())
	url, tlsCfg := n.tlsURL()
	_, err := amqpsink.Dial(url, amqpsink.Options{})
	require.Error(t, err, "the node's certificate is not trusted without the TLS config")
	s, err := amqpsink.Dial(url, amqpsink.Options{}, amqp.Config{TLSClientConfig: tlsCfg})
	require.NoError(t, err)
	defer s.Close()
	es := entries(tp.exchange, 3, func(int) string { return "k" })
	for _, err := range s.Publish(ctxT(t), es) {
		require.NoError(t, err)
	}
	got := tp.read(3)
	for i, d := range got {
		require.Equal(t, es[i].ID, d.MessageId)
	}
}
