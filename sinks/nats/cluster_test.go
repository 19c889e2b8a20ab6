package natssink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	"github.com/outboxrelay/outbox/internal/brokerproc"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// startCluster starts a JetStream cluster of n embedded servers, shut down
// when the test ends, and waits until it can create a stream.
func startCluster(t *testing.T, n int) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range ports {
		p, err := brokerproc.PickPort()
		require.NoError(t, err)
		ports[i], routes[i] = p, fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	name := "c" + suffix()
	srvs := make([]*server.Server, n)
	for i := range srvs {
		srv, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("%s-n%d", name, i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
		require.NoError(t, err)
		srv.Start()
		t.Cleanup(srv.Shutdown)
		srvs[i] = srv
	}
	for _, s := range srvs {
		require.True(t, s.ReadyForConnections(30*time.Second), "cluster server not ready")
	}
	return srvs
}

// TestStreamWithoutLeaderIsRetryable: in a cluster, publishing to a
// stream whose only replica's server is down gets "no responders" (or no
// answer), though the stream exists: a stream without a leader, as in a
// leader change, not a missing stream. The entry fails retryable, never
// permanent: the reason says the stream did not answer, or that the
// stream could not be looked up (when the server was also the meta leader,
// the others are electing a new one).
func TestStreamWithoutLeaderIsRetryable(t *testing.T) {
	t.Parallel()
	srvs := startCluster(t, 3)
	js, err := jetstream.New(connect(t, srvs[0].ClientURL()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info := createR1(ctx, t, js, "R1")
	var host, other *server.Server
	for _, s := range srvs {
		if s.Name() == info.Cluster.Leader {
			host = s
		} else if other == nil {
			other = s
		}
	}
	require.NotNil(t, host, "the stream's server %q", info.Cluster.Leader)
	sink, err := natssink.Dial(other.ClientURL(), natssink.Options{PublishTimeout: 3 * time.Second})
	require.NoError(t, err)
	defer sink.Close()
	// Until the stream's interest has reached the sink's server over the
	// routes, publishing gets "no responders" too (retryable, as below).
	for err := publishOne(t, sink, outbox.Entry{ID: "before", Topic: "r1.R1"}); err != nil; err = publishOne(t, sink, outbox.Entry{ID: "before", Topic: "r1.R1"}) {
		require.NotEqual(t, backoff.ClassPermanent, backoff.ClassOf(err), "%v", err)
		require.NoError(t, ctx.Err(), "the stream never took a message: %v", err)
		time.Sleep(50 * time.Millisecond)
	}

	host.Shutdown()
	host.WaitForShutdown()
	err = publishOne(t, sink, outbox.Entry{ID: "during", Topic: "r1.R1"})
	require.Error(t, err)
	require.NotEqual(t, backoff.ClassPermanent, backoff.ClassOf(err), "%v", err)
	require.NotErrorIs(t, err, natssink.ErrNoStream)
	t.Logf("with the stream's server down: %v", err)
}

// createR1 creates (retrying while the cluster forms) an R1 stream name
// capturing r1.name, and returns its info, once it has a leader.
func createR1(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	for {
		require.NoError(t, ctx.Err(), "stream %s could not be created in the cluster", name)
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := js.CreateOrUpdateStream(actx, jetstream.StreamConfig{Name: name, Subjects: []string{"r1." + name}, Replicas: 1, Storage: jetstream.FileStorage})
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = st.Info(actx)
		}
		acancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			return info
		}
		time.Sleep(100 * time.Millisecond)
	}
}
