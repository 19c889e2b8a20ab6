package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/servers"
)

func TestSinkScenariosPublishThroughTheirSink(t *testing.T) {
	t.Parallel()
	kinds := map[brokerKind]bool{}
	for _, sc := range scenarios() {
		kinds[sc.broker] = true
		if sc.control != "" {
			// The control relay publishes with the Kafka sink only.
			require.Equal(t, brokerKafka, sc.broker, sc.name)
		}
		if sc.broker != brokerKafka {
			require.True(t, strings.HasPrefix(sc.name, string(sc.broker)+"/"), "%s: named after its broker", sc.name)
			require.Equal(t, backendPostgres, sc.backend, "%s: a Postgres outbox", sc.name)
			// The -short run (CI) keeps each one brief.
			require.LessOrEqual(t, sc.short, 15*time.Second, sc.name)
		}
	}
	require.True(t, kinds[brokerNATS] && kinds[brokerAMQP] && kinds[brokerKafka], "a scenario per broker: %v", kinds)
}

func TestTargetsSelectTheSink(t *testing.T) {
	t.Parallel()
	r := &run{h: &harness{cfg: defaultConfig(true)}}
	n := natsTarget{r: r, srv: fakeServer("nats://127.0.0.1:4999")}
	require.Equal(t, []string{"--sink-url", "nats://127.0.0.1:4999", "--nats-publish-timeout", "1s"}, n.relayArgs())
	a := &amqpTarget{r: r, srv: fakeServer("amqp://guest:guest@127.0.0.1:5999/")}
	require.Equal(t, []string{"--sink-url", "amqp://guest:guest@127.0.0.1:5999/", "--amqp-publish-timeout", "1s"}, a.relayArgs())
}

type fakeServer string

func (fakeServer) Kill()                         {}
func (fakeServer) Restart(context.Context) error { return nil }
func (f fakeServer) URL() string                 { return string(f) }
func (fakeServer) Close()                        {}

func TestMissingBinaryNamesTheDebianPackage(t *testing.T) {
	t.Parallel()
	err := notInstalled(missingBinary("nats-server", "nats-server"))
	var m *missingError
	require.ErrorAs(t, err, &m, "skipped, or a failure under OUTBOX_REQUIRE_SERVICES=1")
	require.Contains(t, err.Error(), "apt-get install nats-server")
	require.True(t, errors.Is(missingBinary("x", "y"), servers.ErrNotInstalled))
}

func TestReportNamesTheBroker(t *testing.T) {
	t.Parallel()
	h := &harness{cfg: defaultConfig(true)}
	sc := sinkRestart("nats/relay-kill+broker-restart", brokerNATS)
	rs := []*result{{sc: sc, report: &history.Report{Appended: 2, Delivered: 2}, observed: []string{"On the wire: 3 publishes, 1 of them re-publishes"}}}
	path := filepath.Join(t.TempDir(), "r.md")
	require.NoError(t, writeReport(path, h, rs, time.Minute))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), "publishing to a private nats-server -js (file storage; the NATS sink)")
	require.Contains(t, string(b), "**No duplicate.** Every re-publish")
	require.Contains(t, string(b), "\nOn the wire: 3 publishes, 1 of them re-publishes\n")
}

// TestTargetsSurviveAServerKill starts each private server as a scenario
// does, publishes to what startTarget set up with the broker's own client,
// kills and restarts the server, and reads back everything it confirmed:
// the stream, the durable queue and the tap come back.
func TestTargetsSurviveAServerKill(t *testing.T) {
	t.Parallel()
	for _, kind := range []brokerKind{brokerNATS, brokerAMQP} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			r := &run{h: &harness{cfg: defaultConfig(true)}, sc: &scenario{broker: kind}, dir: t.TempDir()}
			r.log, _ = os.Create(filepath.Join(r.dir, "harness.log"))
			t.Cleanup(func() {
				for i := len(r.cleanup) - 1; i >= 0; i-- {
					r.cleanup[i]()
				}
				_ = r.log.Close()
			})
			err := r.startTarget(ctx, r.brokerDir())
			var m *missingError
			if errors.As(err, &m) {
				if os.Getenv("OUTBOX_REQUIRE_SERVICES") == "1" {
					t.Fatal(err)
				}
				t.Skip(err)
			}
			require.NoError(t, err)
			pub := publisher(t, kind, r.server.URL())
			for _, id := range []string{"a1", "a2", "a3"} {
				pub(id)
			}
			r.server.Kill()
			require.NoError(t, r.server.Restart(ctx))
			pub = publisher(t, kind, r.server.URL())
			pub("b1")
			ds, err := r.target.consume(ctx)
			require.NoError(t, err)
			require.Len(t, r.observed, 1, "what the harness saw of the broker, for the report")
			t.Log(r.observed[0])
			var ids []string
			for _, d := range ds {
				ids = append(ids, d.ID)
				require.False(t, d.At.IsZero(), "%s has a time", d.ID)
			}
			require.Equal(t, []string{"a1", "a2", "a3", "b1"}, ids)
			require.True(t, slices.IsSortedFunc(ds, func(a, b history.Delivery) int { return a.At.Compare(b.At) }))
		})
	}
}

// publisher returns a function that publishes one message with the
// entry ID id the way the sink does, and waits for the broker's
// acknowledgement (retrying while a restarted server recovers).
func publisher(t *testing.T, kind brokerKind, url string) func(id string) {
	t.Helper()
	if kind == brokerNATS {
		nc, err := nats.Connect(url)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		return func(id string) {
			m := nats.NewMsg(topic)
			m.Header.Set("outbox-id", id)
			require.Eventually(t, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
				return err == nil
			}, 30*time.Second, 100*time.Millisecond)
		}
	}
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	return func(id string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, topic, "k", true, false, amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent})
		require.NoError(t, err)
		ok, err := c.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
}

// Not parallel: it sets OUTBOX_NATS_SERVER for the whole binary.
func TestMissingNATSServerIsAMissingService(t *testing.T) {
	t.Setenv("OUTBOX_NATS_SERVER", filepath.Join(t.TempDir(), "nats-server"))
	_, err := startNATSServer(context.Background(), t.TempDir())
	var m *missingError
	require.ErrorAs(t, notInstalled(err), &m)
	require.Contains(t, err.Error(), "apt-get install nats-server")
	t.Log(err)
}
