package app

// Issue 27, point 1, end to end: `outbox relay` against a broker that does
// not create topics names its flags (not the sink's Go options) in what it
// logs and in the parked reasons, and /readyz reports not ready while
// every publish fails, and ready again once one succeeds.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outbox"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/relaycmd"
)

func TestRelayUnknownTopicNamesFlagsAndReadiness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// No auto-creation (kfake's default), as with the relay's default.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "audit"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	url, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Append(ctx, outbox.Entry{ID: "o1", Topic: "orders", Key: "k1", Payload: []byte("1")}); err != nil {
		t.Fatal(err)
	}

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	run := startCLI(t, "relay", "--store", url, "--prefix", prefix, "--kafka-brokers", strings.Join(cluster.ListenAddrs(), ","),
		"--kafka-publish-timeout", "1s", "--kafka-unknown-topic-timeout", "4s", "--poll-interval", "100ms",
		"--metrics-addr", addr, "--log-format", "json")
	run.waitFor(t, regexp.MustCompile(`(outbox relay: running)`))

	// Every publish fails: after twice --kafka-publish-timeout (2s), not
	// ready, saying why; /healthz stays about the process.
	ready := func() (int, relaycmd.ReadyReport) {
		t.Helper()
		code, body := httpGet(t, "http://"+addr+"/readyz")
		var rep relaycmd.ReadyReport
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatalf("/readyz: %v: %s", err, body)
		}
		return code, rep
	}
	waitReady := func(want int) relaycmd.ReadyReport {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second) // watchdog
		for {
			code, rep := ready()
			if code == want {
				return rep
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz stayed %d (want %d): %+v\n%s", code, want, rep, run.errs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	rep := waitReady(http.StatusServiceUnavailable)
	if rep.Ready || rep.Publish.OK || !rep.Kafka.OK || !rep.Store.OK || !strings.Contains(rep.Publish.Error, "every publish has failed") ||
		!strings.Contains(rep.Publish.Error, `topic "orders"`) || !strings.Contains(rep.Publish.Error, "--kafka-auto-create-topics") {
		t.Errorf("/readyz while every publish fails: %+v", rep)
	}
	if code, body := httpGet(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while every publish fails: %d %s", code, body)
	}

	// The entry parks once the topic has been unknown for
	// --kafka-unknown-topic-timeout; its reason names the flags.
	var parked []outbox.Entry
	for deadline := time.Now().Add(60 * time.Second); len(parked) == 0; time.Sleep(50 * time.Millisecond) {
		if parked, err = b.Parked(ctx, "", 10); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the entry of the unknown topic did not park:\n%s", run.errs)
		}
	}
	reason := parked[0].LastError
	t.Logf("/readyz.publish while every publish fails: %s\nparked reason: %s", rep.Publish.Error, reason)
	for _, want := range []string{`topic "orders" has been unknown to the brokers`, "--kafka-unknown-topic-timeout (4s)", "--kafka-auto-create-topics"} {
		if !strings.Contains(reason, want) {
			t.Errorf("the parked reason lacks %q: %s", want, reason)
		}
	}
	run.waitFor(t, regexp.MustCompile(`("msg":"outbox relay: every publish has failed for a while)`))
	logs := run.errs.String()
	for _, want := range []string{"--kafka-unknown-topic-timeout", "--kafka-auto-create-topics"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the relay's log never names %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs+reason, "Options.") || strings.Contains(logs+reason, "kgo.AllowAutoTopicCreation") {
		t.Errorf("the relay names a Go option instead of its flag:\n%s\n%s", reason, logs)
	}

	// One acknowledged record: ready again.
	if err := b.Append(ctx, outbox.Entry{ID: "a1", Topic: "audit", Key: "k2", Payload: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if rep := waitReady(http.StatusOK); !rep.Ready || !rep.Publish.OK || rep.Publish.Error != "" {
		t.Errorf("/readyz after a publish succeeded: %+v", rep)
	}
	if code := run.finish(t); code != 0 {
		t.Fatalf("relay exited %d\n%s", code, run.errs)
	}
}
