package kafkasink_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// groupMembers describes group through admin: its state and member IDs
// ("" and none before the group exists).
func groupMembers(t *testing.T, admin *kgo.Client, group string) (string, []string) {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(context.Background(), admin)
	require.NoError(t, err)
	require.Len(t, resp.Groups, 1)
	g := resp.Groups[0]
	if g.ErrorCode == kerr.GroupIDNotFound.Code {
		return "", nil // not created yet
	}
	require.NoError(t, kerr.ErrorForCode(g.ErrorCode))
	var ids []string
	for _, m := range g.Members {
		ids = append(ids, m.MemberID)
	}
	return g.State, ids
}

// TestOversizeRetryStaysOutOfTheCallersGroup gives the sink a client
// that also consumes as group "app" and publishes an oversize record, so
// the sink builds its client for producing records alone: that client
// must not join the group. The group keeps its one member, and no
// JoinGroup for it reaches the broker, while the test watches for 2s
// after the publish (the copied client joined within milliseconds).
func TestOversizeRetryStaysOutOfTheCallersGroup(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"out", "in"}, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	joins := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: "app", Observe: true, Count: -1})
	app := newClient(t, c, kgo.ConsumerGroup("app"), kgo.ConsumeTopics("in"), kgo.ProducerLinger(50*time.Millisecond))
	admin := newClient(t, c)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { // the application's poll loop
		for ctx.Err() == nil {
			app.PollFetches(ctx)
		}
	}()
	var member string
	for {
		state, ids := groupMembers(t, admin, "app")
		if state == "Stable" && len(ids) == 1 {
			member = ids[0]
			break
		}
		require.NoError(t, ctx.Err(), "the group never became stable: %s %v", state, ids)
		time.Sleep(20 * time.Millisecond)
	}
	joined := joins.Hits()

	sink, err := kafkasink.New(app, kafkasink.Options{})
	require.NoError(t, err)
	defer sink.Close()
	msgs := entries(5, "out", func(i int) string { return "k" + strconv.Itoa(i) })
	msgs[2].Payload = randomBytes(6000)
	errs := sink.Publish(context.Background(), msgs)
	for i, err := range errs {
		if i == 2 {
			require.ErrorIs(t, err, kerr.MessageTooLarge, "the record failed alone, through the sink's own client")
			assert.Equal(t, backoff.ClassPermanent, backoff.ClassOf(err))
			continue
		}
		assert.NoError(t, err, "entry %d", i)
	}

	for watch := time.Now().Add(2 * time.Second); time.Now().Before(watch); time.Sleep(50 * time.Millisecond) {
		_, ids := groupMembers(t, admin, "app")
		require.Equal(t, []string{member}, ids, "the group has only the application's member")
		require.Equal(t, joined, joins.Hits(), "nobody else asked to join the group")
	}
}
