package natssink_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// startEmbedded starts an in-process nats-server with JetStream, its store
// in dir, on a random port of 127.0.0.1.
func startEmbedded(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
	})
	require.NoError(t, err)
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("the embedded nats-server did not get ready within 10s")
	}
	return srv
}

var (
	sharedOnce sync.Once
	sharedSrv  *server.Server
)

// embeddedURL is the URL of an embedded server the test binary shares
// (tests isolate themselves by their own streams and subjects).
func embeddedURL(t testing.TB) string {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := tempDir()
		require.NoError(t, err)
		sharedSrv = startEmbedded(t, dir, -1)
	})
	return sharedSrv.ClientURL()
}

// ownEmbedded starts an embedded server for this test alone, shut down
// when it ends.
func ownEmbedded(t testing.TB) *server.Server {
	t.Helper()
	srv := startEmbedded(t, t.TempDir(), -1)
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// realURL is the URL of the real nats-server (testenv.NATSURL), or skips
// the test (fails it under OUTBOX_REQUIRE_SERVICES=1) when none answers.
func realURL(t testing.TB) string {
	t.Helper()
	u := testenv.NATSURL()
	nc, err := nats.Connect(u, nats.Timeout(2*time.Second))
	if err == nil {
		js, jerr := jetstream.New(nc)
		if jerr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
		}
		nc.Close()
	}
	if err != nil {
		testenv.Unavailable(t, "NATS", "OUTBOX_NATS_URL", err)
	}
	return u
}

// target is a server the tests run against.
type target struct {
	name string
	url  func(testing.TB) string
}

// targets are the embedded server and the real one.
var targets = []target{
	{"Embedded", embeddedURL},
	{"Real", realURL},
}

// connect connects to url, closed when the test ends.
func connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// suffix is a random name suffix, to isolate tests sharing a server.
func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// newStream creates a stream capturing subjects (file storage, a 2m
// duplicate window unless cfg says otherwise) and deletes it when the
// test ends. cfg may adjust the configuration.
func newStream(t testing.TB, nc *nats.Conn, name string, subjects []string, cfg ...func(*jetstream.StreamConfig)) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	c := jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}
	for _, f := range cfg {
		f(&c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, c)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	return st
}

// readAll reads every message of st, in stream order, failing the test if
// they cannot be read within 30s.
func readAll(t testing.TB, st jetstream.Stream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	require.NoError(t, err)
	out := make([]*jetstream.RawStreamMsg, 0, info.State.Msgs)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		require.NoError(t, err, "message %d of %d", seq, info.State.LastSeq)
		out = append(out, m)
	}
	return out
}

var sharedDir string

// tempDir is the shared server's store directory, removed by TestMain.
func tempDir() (string, error) {
	d, err := os.MkdirTemp("", "natssink-test-")
	sharedDir = d
	return d, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedSrv != nil {
		sharedSrv.Shutdown()
		sharedSrv.WaitForShutdown()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// ids are the entry IDs (ID header) of msgs, in order.
func ids(msgs []*jetstream.RawStreamMsg) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Header.Get("outbox-id")
	}
	return out
}

// only is the IDs of got that are among want, in got's order.
func only(got []string, want ...string) []string {
	var out []string
	for _, g := range got {
		if slices.Contains(want, g) {
			out = append(out, g)
		}
	}
	return out
}
