package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const testTopic = "chaos"

// fixture is a kfake cluster with the injector installed and its API
// served by an httptest server, all in this process.
type fixture struct {
	brokers []string
	api     string // base URL of the control API
	in      *injector
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, testTopic))
	require.NoError(t, err)
	in := newInjector(c)
	srv := httptest.NewServer(in.handler())
	t.Cleanup(func() {
		srv.Close()
		in.close()
		c.Close()
	})
	return &fixture{brokers: c.ListenAddrs(), api: srv.URL, in: in}
}

// call makes one API call and returns the status and body.
func call(t *testing.T, base, method, pathQuery string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+pathQuery, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func arm(t *testing.T, base, pathQuery string) {
	t.Helper()
	code, body := call(t, base, http.MethodPost, pathQuery)
	require.Equal(t, http.StatusOK, code, body)
}

func stats(t *testing.T, base string) Stats {
	t.Helper()
	code, body := call(t, base, http.MethodGet, "/stats")
	require.Equal(t, http.StatusOK, code, body)
	var s Stats
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	return s
}

// disconnects counts the connections a kgo client saw close.
type disconnects struct{ n atomic.Int64 }

func (d *disconnects) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { d.n.Add(1) }

func newClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(testTopic),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
		// A retriable produce error makes kgo refresh metadata before
		// retrying, and it refreshes at most once per MetadataMinAge
		// (5s by default): without this each fault costs seconds.
		kgo.MetadataMinAge(50 * time.Millisecond),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// written is how many records the topic holds: the sum of its partitions'
// high watermarks (nothing here ever deletes).
func written(t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = testTopic
	for p := range int32(2) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	var n int64
	for _, t2 := range resp.Topics {
		for _, p := range t2.Partitions {
			require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
			n += p.Offset
		}
	}
	return n
}

func produce(ctx context.Context, cl *kgo.Client, v string) error {
	return cl.ProduceSync(ctx, &kgo.Record{Key: []byte(v), Value: []byte(v)}).FirstErr()
}

// The faults below run against a broker in this process; TestBinary runs
// them against the built command.
func TestFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range faultCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			tc.run(t, f.brokers, f.api)
		})
	}
}

var faultCases = []struct {
	name string
	run  func(t *testing.T, brokers []string, api string)
}{
	{"RetriableProduceErrorsAreRetriedAndTheRecordLandsOnce", func(t *testing.T, brokers []string, api string) {
		cl := newClient(t, brokers)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, produce(ctx, cl, "warm-up")) // producer ID and metadata first
		arm(t, api, "/produce-errors?count=2&code=NOT_ENOUGH_REPLICAS")
		arm(t, api, "/produce-errors?count=1&code=not_leader_for_partition")
		require.NoError(t, produce(ctx, cl, "a"))
		s := stats(t, api)
		require.Equal(t, int64(3), s.Applied.ProduceErrors)
		require.Zero(t, s.Armed.ProduceErrors)
		require.Equal(t, int64(2), written(t, cl))
	}},
	{"ProduceErrorsReachTheClient", func(t *testing.T, brokers []string, api string) {
		cl := newClient(t, brokers, kgo.RecordRetries(1))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, produce(ctx, cl, "warm-up"))
		arm(t, api, "/produce-errors?count=5&code=NOT_ENOUGH_REPLICAS")
		require.ErrorIs(t, produce(ctx, cl, "a"), kerr.NotEnoughReplicas)
		arm(t, api, "/reset")
		arm(t, api, "/produce-errors?count=1&code=INVALID_RECORD")
		require.ErrorIs(t, produce(ctx, cl, "b"), kerr.InvalidRecord, "not retriable: fails at once")
		require.Equal(t, int64(1), written(t, cl), "a faulted produce writes nothing")
	}},
	{"RequestTimedOutIsRetriedEvenPastRecordRetries", func(t *testing.T, brokers []string, api string) {
		// kgo cannot know whether a timed-out batch was written, so it
		// keeps retrying it (the retry limit does not apply).
		cl := newClient(t, brokers, kgo.RecordRetries(1))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, produce(ctx, cl, "warm-up"))
		arm(t, api, "/produce-errors?count=3&code=REQUEST_TIMED_OUT")
		require.NoError(t, produce(ctx, cl, "a"))
		require.Equal(t, int64(3), stats(t, api).Applied.ProduceErrors)
		require.Equal(t, int64(2), written(t, cl))
	}},
	{"ProduceDelayHoldsOnlyItsConnectionThenWrites", func(t *testing.T, brokers []string, api string) {
		held, other := newClient(t, brokers), newClient(t, brokers)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, produce(ctx, held, "warm-up"))
		require.NoError(t, produce(ctx, other, "warm-up"))
		const delay = 1500 * time.Millisecond
		arm(t, api, fmt.Sprintf("/produce-delay?count=1&delay=%v", delay))
		start := time.Now()
		heldDone := make(chan error, 1)
		go func() { heldDone <- produce(ctx, held, "held") }()
		require.Eventually(t, func() bool { return stats(t, api).Applied.ProduceDelays == 1 }, 5*time.Second, 10*time.Millisecond)
		// Another client's produce (another connection) is served
		// while the first is held.
		require.NoError(t, produce(ctx, other, "meanwhile"))
		select {
		case err := <-heldDone:
			t.Fatalf("the held produce returned (%v) before another connection's produce", err)
		default:
		}
		require.NoError(t, <-heldDone)
		require.GreaterOrEqual(t, time.Since(start), delay)
		require.Equal(t, int64(4), written(t, held))
	}},
	{"DroppedConnectionsAreRetriedAndTheRecordLandsOnce", func(t *testing.T, brokers []string, api string) {
		var d disconnects
		cl := newClient(t, brokers, kgo.WithHooks(&d))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, produce(ctx, cl, "warm-up"))
		before := d.n.Load()
		arm(t, api, "/drop-connections?count=2")
		require.NoError(t, produce(ctx, cl, "a"))
		require.GreaterOrEqual(t, d.n.Load()-before, int64(2), "the client saw its connection close")
		require.Equal(t, int64(2), stats(t, api).Applied.DroppedConnections)
		require.Equal(t, int64(2), written(t, cl), "the idempotent retry lands once")
	}},
	{"ResetDisarmsAndReleasesHeldRequests", func(t *testing.T, brokers []string, api string) {
		cl := newClient(t, brokers)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, produce(ctx, cl, "warm-up"))
		arm(t, api, "/produce-delay?count=1&delay=1m")
		arm(t, api, "/produce-delay?count=1&delay=1m")
		start := time.Now()
		heldDone := make(chan error, 1)
		go func() { heldDone <- produce(ctx, cl, "held") }()
		require.Eventually(t, func() bool { return stats(t, api).Applied.ProduceDelays == 1 }, 5*time.Second, 10*time.Millisecond)
		arm(t, api, "/produce-errors?count=100&code=NOT_ENOUGH_REPLICAS")
		arm(t, api, "/drop-connections?count=7")
		code, body := call(t, api, http.MethodPost, "/reset")
		require.Equal(t, http.StatusOK, code)
		var r armedReply
		require.NoError(t, json.Unmarshal([]byte(body), &r))
		require.Equal(t, Armed{ProduceErrors: 100, ProduceDelays: 1, DropConnections: 7}, *r.Disarmed)
		require.Equal(t, Armed{}, r.Armed)
		require.NoError(t, <-heldDone)
		require.NoError(t, produce(ctx, cl, "after"))
		require.Less(t, time.Since(start), 30*time.Second)
		s := stats(t, api)
		require.Equal(t, Applied{ProduceDelays: 1}, s.Applied)
		require.Equal(t, int64(3), written(t, cl))
	}},
}

func TestAPIRejectsBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		name, method, path string
		status             int
		says               string
	}{
		{"MissingCount", "POST", "/produce-errors?code=NOT_ENOUGH_REPLICAS", 400, "count is required"},
		{"ZeroCount", "POST", "/drop-connections?count=0", 400, "from 1 to"},
		{"NonNumericCount", "POST", "/drop-connections?count=two", 400, "from 1 to"},
		{"MissingCode", "POST", "/produce-errors?count=1", 400, "code is required"},
		{"UnknownCode", "POST", "/produce-errors?count=1&code=NOT_A_CODE", 400, "not a Kafka error name"},
		{"NoneIsNotAnError", "POST", "/produce-errors?count=1&code=NONE", 400, "not a Kafka error name"},
		{"BadDelay", "POST", "/produce-delay?count=1&delay=soon", 400, "Go duration"},
		{"NegativeDelay", "POST", "/produce-delay?count=1&delay=-1s", 400, "Go duration"},
		{"HugeDelay", "POST", "/produce-delay?count=1&delay=11m", 400, "at most 10m"},
		{"MisspeltParameter", "POST", "/drop-connections?cuont=1", 400, `unknown parameter "cuont"`},
		{"RepeatedParameter", "POST", "/drop-connections?count=1&count=2", 400, "given 2 times"},
		{"ResetTakesNoParameters", "POST", "/reset?all=1", 400, "no parameters"},
		{"ArmingIsPost", "GET", "/drop-connections?count=1", 405, "takes POST"},
		{"StatsIsGet", "POST", "/stats", 405, "takes GET"},
		{"UnknownEndpoint", "POST", "/partition", 404, "no endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := call(t, f.api, tc.method, tc.path)
			require.Equal(t, tc.status, code, body)
			require.Contains(t, body, tc.says)
		})
	}
	require.Equal(t, Stats{}, stats(t, f.api), "nothing was armed")
}

func TestKerrByNameKnowsTheUsualCodes(t *testing.T) {
	t.Parallel()
	for _, e := range []*kerr.Error{kerr.NotEnoughReplicas, kerr.NotLeaderForPartition, kerr.RequestTimedOut, kerr.UnknownServerError, kerr.InvalidRecord} {
		require.Same(t, e, kerrByName[e.Message])
	}
	_, ok := kerrByName["NONE"]
	require.False(t, ok)
}
