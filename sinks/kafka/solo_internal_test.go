package kafkasink

import (
	"crypto/tls"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// TestSoloOptionsKeepOnlyProducerOptions builds the oversize client's
// options from a client that also consumes as a static group member and
// is transactional: the copy has the caller's connection and producer
// settings, and none of its consumer, group or transactional settings, nor
// its hooks.
func TestSoloOptionsKeepOnlyProducerOptions(t *testing.T) {
	t.Parallel()
	part := kgo.StickyKeyPartitioner(nil)
	tlsCfg := &tls.Config{ServerName: "kafka.example"}
	mech := plain.Auth{User: "u", Pass: "p"}.AsMechanism()
	callerHook := &connWatch{}
	like, err := kgo.NewClient(
		kgo.SeedBrokers("127.0.0.1:1", "127.0.0.1:2"),
		kgo.ClientID("app"),
		kgo.DialTLSConfig(tlsCfg),
		kgo.SASL(mech),
		kgo.WithHooks(callerHook),
		kgo.MetadataMinAge(time.Second),
		kgo.ConsumerGroup("app"),
		kgo.InstanceID("app-1"),
		kgo.ConsumeTopics("in"),
		kgo.TransactionalID("app-txn"),
		kgo.RecordPartitioner(part),
		kgo.RecordRetries(3),
		kgo.ProducerBatchMaxBytes(2048),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProduceRequestTimeout(4*time.Second),
		kgo.ProducerLinger(time.Second),
	)
	require.NoError(t, err)
	defer like.Close()

	own := &connWatch{}
	opts, err := soloOptions(like, own)
	require.NoError(t, err)
	solo, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer solo.Close()

	// Left out.
	assert.Equal(t, "", solo.OptValue(kgo.ConsumerGroup))
	assert.Equal(t, []any{"", false}, solo.OptValues(kgo.InstanceID))
	assert.Empty(t, solo.OptValue(kgo.ConsumeTopics))
	assert.Equal(t, []any{"", false}, solo.OptValues(kgo.TransactionalID))
	hooks := reflect.ValueOf(solo.OptValue(kgo.WithHooks)) // kgo's unexported hooks type, a []Hook
	require.Equal(t, 1, hooks.Len(), "only the sink's own hook")
	assert.Same(t, own, hooks.Index(0).Interface())
	assert.Equal(t, time.Duration(0), solo.OptValue(kgo.ProducerLinger))

	// Carried over.
	assert.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, solo.OptValue(kgo.SeedBrokers))
	assert.Equal(t, "app", solo.OptValue(kgo.ClientID))
	assert.Same(t, tlsCfg, solo.OptValue(kgo.DialTLSConfig))
	mechs, _ := solo.OptValue(kgo.SASL).([]sasl.Mechanism)
	require.Len(t, mechs, 1)
	assert.Equal(t, "PLAIN", mechs[0].Name())
	assert.Equal(t, time.Second, solo.OptValue(kgo.MetadataMinAge))
	assert.Equal(t, part, solo.OptValue(kgo.RecordPartitioner))
	assert.Equal(t, int64(3), solo.OptValue(kgo.RecordRetries))
	assert.Equal(t, int32(2048), solo.OptValue(kgo.ProducerBatchMaxBytes))
	assert.Equal(t, []kgo.CompressionCodec{kgo.NoCompression()}, solo.OptValue(kgo.ProducerBatchCompression))
	assert.Equal(t, 4*time.Second, solo.OptValue(kgo.ProduceRequestTimeout))
	assert.Equal(t, like.OptValue(kgo.RequiredAcks), solo.OptValue(kgo.RequiredAcks))
}

// TestSoloOptionsKeepTheCallersDialer: without a TLS config, the caller's
// Dialer is carried over.
func TestSoloOptionsKeepTheCallersDialer(t *testing.T) {
	t.Parallel()
	dial := (&net.Dialer{Timeout: time.Second}).DialContext
	like, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.Dialer(dial))
	require.NoError(t, err)
	defer like.Close()
	opts, err := soloOptions(like, nil)
	require.NoError(t, err)
	solo, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer solo.Close()
	assert.Equal(t, reflect.ValueOf(dial).Pointer(), reflect.ValueOf(solo.OptValue(kgo.Dialer)).Pointer())
	assert.Nil(t, solo.OptValue(kgo.DialTLSConfig))
	assert.Equal(t, 0, reflect.ValueOf(solo.OptValue(kgo.WithHooks)).Len(), "no hooks: the sink has none of its own for a caller's client")
}
