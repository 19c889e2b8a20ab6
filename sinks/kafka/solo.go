package kafkasink

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/outboxrelay/outbox"
)

// isolateTooLarge produces again, one at a time, the records that failed
// as too large: a broker rejects a whole Kafka batch when it is over its
// limit, so the records that shared the batch with an oversize one failed
// with it. They go through a separate client (built once, see
// soloOptions) that produces one record at a time, so each is alone in
// its batch for certain: the main client may be batching the records of
// other Publish calls with it. A record that fails alone is too large by
// itself.
func (s *Sink) isolateTooLarge(ctx context.Context, client *kgo.Client, recs []*kgo.Record, errs []error) {
	for i, err := range errs {
		if recs[i] == nil || !tooLarge(err) || ctx.Err() != nil || overtaken(recs, errs, i) {
			continue
		}
		r := recs[i]
		errs[i] = s.solo.produce(ctx, client, s.conn, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers})
	}
}

// soloProducer produces one record at a time through a client of its own.
type soloProducer struct {
	once   sync.Once
	turn   chan struct{} // holds a token while a record is being produced
	mu     sync.Mutex    // guards client and err
	client *kgo.Client
	err    error
}

// produce produces rec alone, waiting for its turn at most until ctx ends.
// The first call builds the client from like's options (see soloOptions).
func (p *soloProducer) produce(ctx context.Context, like *kgo.Client, conn *connWatch, rec *kgo.Record) error {
	p.once.Do(func() { p.turn = make(chan struct{}, 1) })
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.turn }()
	p.mu.Lock()
	if p.client == nil && p.err == nil {
		var opts []kgo.Opt
		if opts, p.err = soloOptions(like, conn); p.err == nil {
			p.client, p.err = kgo.NewClient(opts...)
		}
	}
	cl, err := p.client, p.err
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("kafkasink: build the client that retries oversize records alone: %w", err)
	}
	errs := []error{nil}
	produceAll(ctx, cl, []*kgo.Record{rec}, errs)
	return errs[0]
}

func (p *soloProducer) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		p.client.Close()
		p.client = nil
	}
	if p.err == nil {
		p.err = fmt.Errorf("sink closed: %w", outbox.ErrClosed)
	}
}

// soloOptions returns the options of the client that produces oversize
// records alone: like's connection options and the producer options that
// decide where a record goes and how it is sent, read back with
// Client.OptValues, and nothing else. Not copied, on purpose: anything of
// a consumer or a group (ConsumerGroup, InstanceID, ConsumeTopics, ...: a
// copy would join the caller's group as a second member, or fence the
// caller's static member), TransactionalID, the caller's hooks (they
// observe the caller's client; metrics would count this one's requests in
// it, and some hooks expect one client), WithContext and buffering and
// lingering options (one record at a time, sent at once). Only the sink's
// own connection hook, conn, is installed, when there is one.
//
// Copied: SeedBrokers, ClientID, SoftwareNameAndVersion, WithLogger,
// Dialer or DialTLSConfig, DialTimeout, SASL, RequestTimeoutOverhead,
// ConnIdleTimeout, MaxVersions, MinVersions, RetryBackoffFn,
// RequestRetries, RetryTimeoutFn, BrokerMaxWriteBytes, BrokerMaxReadBytes,
// MetadataMaxAge, MetadataMinAge, AllowAutoTopicCreation, RequiredAcks,
// AllowIdempotentProduceCancellation, ProducerBatchCompression,
// WithCompressor, ProducerBatchMaxBytesFn, RecordPartitioner (a record
// must go to the partition the main client would have picked),
// RackAwarePartitioning, ProduceRequestTimeout, RecordRetries,
// UnknownTopicRetries, RecordDeliveryTimeout, StopProducerOnDataLossDetected
// and ProducerOnDataLossDetected.
func soloOptions(like *kgo.Client, conn *connWatch) ([]kgo.Opt, error) {
	r := optReader{cl: like}
	var opts []kgo.Opt
	add := func(o kgo.Opt) { opts = append(opts, o) }

	// Connection.
	add(kgo.SeedBrokers(get[[]string](&r, kgo.SeedBrokers, "SeedBrokers")...))
	if vs := like.OptValues(kgo.ClientID); len(vs) == 2 && vs[1] == true {
		add(kgo.ClientID(vs[0].(string)))
	}
	if vs := like.OptValues(kgo.SoftwareNameAndVersion); len(vs) == 2 {
		name, _ := vs[0].(string)
		version, _ := vs[1].(string)
		add(kgo.SoftwareNameAndVersion(name, version))
	}
	if l, ok := like.OptValue(kgo.WithLogger).(kgo.Logger); ok && l != nil {
		add(kgo.WithLogger(l))
	}
	// kgo turns DialTLSConfig into a Dialer of its own, so the Dialer is
	// the caller's only without a TLS config.
	if c := get[*tls.Config](&r, kgo.DialTLSConfig, "DialTLSConfig"); c != nil {
		add(kgo.DialTLSConfig(c))
	} else if fn := get[func(context.Context, string, string) (net.Conn, error)](&r, kgo.Dialer, "Dialer"); fn != nil {
		add(kgo.Dialer(fn))
	}
	add(kgo.DialTimeout(get[time.Duration](&r, kgo.DialTimeout, "DialTimeout")))
	if ms := get[[]sasl.Mechanism](&r, kgo.SASL, "SASL"); len(ms) > 0 {
		add(kgo.SASL(ms...))
	}
	add(kgo.RequestTimeoutOverhead(get[time.Duration](&r, kgo.RequestTimeoutOverhead, "RequestTimeoutOverhead")))
	add(kgo.ConnIdleTimeout(get[time.Duration](&r, kgo.ConnIdleTimeout, "ConnIdleTimeout")))
	if v := get[*kversion.Versions](&r, kgo.MaxVersions, "MaxVersions"); v != nil {
		add(kgo.MaxVersions(v))
	}
	if v := get[*kversion.Versions](&r, kgo.MinVersions, "MinVersions"); v != nil {
		add(kgo.MinVersions(v))
	}
	if fn := get[func(int) time.Duration](&r, kgo.RetryBackoffFn, "RetryBackoffFn"); fn != nil {
		add(kgo.RetryBackoffFn(fn))
	}
	add(kgo.RequestRetries(toInt(get[int64](&r, kgo.RequestRetries, "RequestRetries"))))
	if fn := get[func(int16) time.Duration](&r, kgo.RetryTimeoutFn, "RetryTimeoutFn"); fn != nil {
		add(kgo.RetryTimeoutFn(fn))
	}
	add(kgo.BrokerMaxWriteBytes(get[int32](&r, kgo.BrokerMaxWriteBytes, "BrokerMaxWriteBytes")))
	add(kgo.BrokerMaxReadBytes(get[int32](&r, kgo.BrokerMaxReadBytes, "BrokerMaxReadBytes")))
	add(kgo.MetadataMaxAge(get[time.Duration](&r, kgo.MetadataMaxAge, "MetadataMaxAge")))
	add(kgo.MetadataMinAge(get[time.Duration](&r, kgo.MetadataMinAge, "MetadataMinAge")))
	if get[bool](&r, kgo.AllowAutoTopicCreation, "AllowAutoTopicCreation") {
		add(kgo.AllowAutoTopicCreation())
	}

	// Producer.
	add(kgo.RequiredAcks(get[kgo.Acks](&r, kgo.RequiredAcks, "RequiredAcks")))
	if get[bool](&r, kgo.AllowIdempotentProduceCancellation, "AllowIdempotentProduceCancellation") {
		add(kgo.AllowIdempotentProduceCancellation())
	}
	if cs := get[[]kgo.CompressionCodec](&r, kgo.ProducerBatchCompression, "ProducerBatchCompression"); len(cs) > 0 {
		add(kgo.ProducerBatchCompression(cs...))
	}
	if c := get[kgo.Compressor](&r, kgo.WithCompressor, "WithCompressor"); c != nil {
		add(kgo.WithCompressor(c))
	}
	if fn := get[func(string) int32](&r, kgo.ProducerBatchMaxBytesFn, "ProducerBatchMaxBytesFn"); fn != nil {
		add(kgo.ProducerBatchMaxBytesFn(fn))
	}
	if p := get[kgo.Partitioner](&r, kgo.RecordPartitioner, "RecordPartitioner"); p != nil {
		add(kgo.RecordPartitioner(p))
	}
	if get[bool](&r, kgo.RackAwarePartitioning, "RackAwarePartitioning") {
		add(kgo.RackAwarePartitioning())
	}
	add(kgo.ProduceRequestTimeout(get[time.Duration](&r, kgo.ProduceRequestTimeout, "ProduceRequestTimeout")))
	add(kgo.RecordRetries(toInt(get[int64](&r, kgo.RecordRetries, "RecordRetries"))))
	add(kgo.UnknownTopicRetries(toInt(get[int64](&r, kgo.UnknownTopicRetries, "UnknownTopicRetries"))))
	add(kgo.RecordDeliveryTimeout(get[time.Duration](&r, kgo.RecordDeliveryTimeout, "RecordDeliveryTimeout")))
	if get[bool](&r, kgo.StopProducerOnDataLossDetected, "StopProducerOnDataLossDetected") {
		add(kgo.StopProducerOnDataLossDetected())
	}
	if fn := get[func(string, int32)](&r, kgo.ProducerOnDataLossDetected, "ProducerOnDataLossDetected"); fn != nil {
		add(kgo.ProducerOnDataLossDetected(fn))
	}
	add(kgo.ProducerLinger(0)) // one record at a time: nothing to wait for

	if conn != nil {
		add(kgo.WithHooks(conn))
	}
	if r.err != nil {
		return nil, r.err
	}
	return opts, nil
}

// toInt converts a kgo retry count back to the int its option takes,
// capping kgo's "unlimited" (math.MaxInt64) on 32-bit platforms.
func toInt(n int64) int { return int(min(n, math.MaxInt)) }

// optReader reads option values of a client, remembering the first value
// whose type is not the one expected (a kgo version this code does not
// know).
type optReader struct {
	cl  *kgo.Client
	err error
}

// get returns the client's value of opt as a T. A value of another type
// sets r.err; a nil value returns T's zero value.
func get[T any](r *optReader, opt any, name string) T {
	var zero T
	v := r.cl.OptValue(opt)
	if v == nil {
		return zero
	}
	t, ok := v.(T)
	if !ok && r.err == nil {
		r.err = fmt.Errorf("kafkasink: the client's option %s is a %T, not the %T this sink knows; report it", name, v, zero)
	}
	return t
}

// overtaken reports whether a later record of recs[i]'s topic and key was
// written in this call: resending recs[i] now would land it after that
// record, out of its key's order, so it keeps its error (and parkOvertaken
// or its permanent class parks it).
func overtaken(recs []*kgo.Record, errs []error, i int) bool {
	r := recs[i]
	if r.Key == nil {
		return false
	}
	for j := i + 1; j < len(recs); j++ {
		if recs[j] != nil && errs[j] == nil && recs[j].Topic == r.Topic && string(recs[j].Key) == string(r.Key) {
			return true
		}
	}
	return false
}
