package natsinbox_test

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/effectlog"
	"github.com/outboxrelay/outbox/internal/testenv"
	"github.com/outboxrelay/outbox/sinks/nats/natsinbox"
)

func TestMain(m *testing.M) {
	flag.Parse()
	examplesNeedNATS()
	os.Exit(m.Run())
}

// examplesNeedNATS makes the Examples runnable or leaves them out: they
// consume from a real nats-server and an Example cannot skip itself. When
// the server answers, the Examples read its URL from OUTBOX_NATS_URL (set
// here); when it does not and OUTBOX_REQUIRE_SERVICES is not 1, they are
// left out through -test.skip, said on stderr.
func examplesNeedNATS() {
	url := testenv.NATSURL()
	if err := pingJetStream(url); err == nil {
		_ = os.Setenv("OUTBOX_NATS_URL", url)
		return
	} else if !testenv.Required() {
		testenv.SkipExamples("natsinbox", "NATS JetStream", "no server answers ("+err.Error()+"); set OUTBOX_NATS_URL or run ./scripts/services.sh start")
	}
}

func pingJetStream(url string) error {
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// serverURL is the real nats-server's URL (testenv.NATSURL), or skips the
// test (fails it under OUTBOX_REQUIRE_SERVICES=1) when none answers.
func serverURL(t testing.TB) string {
	t.Helper()
	u := testenv.NATSURL()
	if err := pingJetStream(u); err != nil {
		testenv.Unavailable(t, "NATS", "OUTBOX_NATS_URL", err)
	}
	return u
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// env is a test's own stream (subjects <subject>.>) on the real server,
// deleted when the test ends, and a connection to it.
type env struct {
	t       testing.TB
	url     string
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	url := serverURL(t)
	e := &env{t: t, url: url, stream: "INBOX_" + suffix()}
	e.subject = "inboxtest." + e.stream
	e.nc, e.js = e.connect()
	ctx := ctxT(t)
	_, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: e.stream, Subjects: []string{e.subject + ".>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.js.DeleteStream(ctx, e.stream)
	})
	return e
}

// connect makes a connection of its own, closed when the test ends.
func (e *env) connect() (*nats.Conn, jetstream.JetStream) {
	e.t.Helper()
	nc, err := nats.Connect(e.url)
	require.NoError(e.t, err)
	e.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(e.t, err)
	return nc, js
}

// consumer creates a durable pull consumer of the stream (explicit acks)
// through js; cfg may adjust it.
func (e *env) consumer(js jetstream.JetStream, cfg ...func(*jetstream.ConsumerConfig)) jetstream.Consumer {
	e.t.Helper()
	c := jetstream.ConsumerConfig{Durable: "c" + suffix(), AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second}
	for _, f := range cfg {
		f(&c)
	}
	cons, err := js.CreateOrUpdateConsumer(ctxT(e.t), e.stream, c)
	require.NoError(e.t, err)
	return cons
}

// publish publishes one message with the given headers (name, value, ...).
func (e *env) publish(kv ...string) {
	e.t.Helper()
	m := nats.NewMsg(e.subject + ".x")
	for i := 0; i < len(kv); i += 2 {
		m.Header.Set(kv[i], kv[i+1])
	}
	m.Data = []byte("body")
	_, err := e.js.PublishMsg(ctxT(e.t), m)
	require.NoError(e.t, err)
}

// info is the consumer's current state on the server.
func info(t testing.TB, cons jetstream.Consumer) *jetstream.ConsumerInfo {
	t.Helper()
	ci, err := cons.Info(ctxT(t))
	require.NoError(t, err)
	return ci
}

// The committed effects and their checks are effectlog's.
type (
	effect  = effectlog.Effect
	effects = effectlog.Log
)

var newEffects = effectlog.New

// isMsg: the helper hands the handler the jetstream.Msg.
func isMsg(d any) bool { _, ok := d.(jetstream.Msg); return ok }

// eventually polls cond every 20ms, failing the test after a minute.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runConsumer runs c until the test ends, returning a channel with Run's
// result.
func runConsumer[Tx any](t testing.TB, c *natsinbox.Consumer[Tx]) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-res:
			case <-time.After(time.Minute):
				err = fmt.Errorf("Run did not return within a minute of its context's end")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// entry is an outbox entry of key with its per-key sequence number.
func entry(topic, key string, seq int) outbox.Entry {
	return outbox.Entry{
		ID: outbox.NewID(), Topic: topic, Key: key, Payload: []byte("p" + strconv.Itoa(seq)),
		Headers: map[string]string{outbox.HeaderKeySeq: strconv.Itoa(seq)},
	}
}
