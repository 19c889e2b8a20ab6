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
	"github.com/outboxrelay/outbox/inbox"
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

// effect is one applied message as the handler saw it.
type effect struct {
	ID  string
	Key string
	Seq int64
}

// effects is a consumer's committed effects: the handler adds them in the
// Memory store's OnCommit, so only committed transactions count.
type effects struct {
	mu   sync.Mutex
	list []effect
	cond chan struct{} // closed and replaced on every commit
}

func newEffects() *effects { return &effects{cond: make(chan struct{})} }

// handler returns a handler recording each message's effect at commit,
// after asking fail (when not nil) whether this delivery fails.
func (e *effects) handler(fail func(m inbox.Message) error) inbox.Handler[*inbox.MemoryTx] {
	return func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		if _, ok := m.Data.(jetstream.Msg); !ok {
			return fmt.Errorf("Data is %T, want a jetstream.Msg", m.Data)
		}
		if fail != nil {
			if err := fail(m); err != nil {
				return err
			}
		}
		tx.OnCommit(func() { e.add(effect{m.ID, m.Key, m.Seq}) })
		return nil
	}
}

func (e *effects) add(f effect) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, f)
	close(e.cond)
	e.cond = make(chan struct{})
}

func (e *effects) snapshot() ([]effect, chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]effect(nil), e.list...), e.cond
}

// wait waits until at least n effects committed, failing the test after a
// generous deadline.
func (e *effects) wait(t testing.TB, n int) []effect {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		list, changed := e.snapshot()
		if len(list) >= n {
			return list
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d effects committed after a minute, want %d", len(list), n)
		}
	}
}

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
