package app

// `outbox relay --sink-url nats://...` and `amqp://...` end to end, in
// process, from a PostgreSQL outbox to the real NATS server (JetStream)
// and the real RabbitMQ: every entry arrives with its ID, key, payload and
// headers, in per-key order; /readyz names the broker, goes not ready once
// every publish has failed for twice the sink's publish timeout and ready
// again after a success; the entry the broker cannot take is parked with a
// reason naming the relay's flags; no password is printed or served.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/relaycmd"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// sinkMsg is a message read back from a broker.
type sinkMsg struct {
	id, key, payload string
	headers          map[string]string
	// where is the subject (NATS) or routing key (RabbitMQ).
	where string
}

// sinkBroker is one broker of TestRelaySinkURLEndToEnd, with a stream
// (NATS) or an exchange and queue (RabbitMQ) of the test's own.
type sinkBroker struct {
	name string // as /readyz's sink_name says it
	// args select the broker and map the topic "orders" onto what the
	// test reads; every other topic goes where the broker refuses it.
	args []string
	// env is the environment the relay runs with; secrets must not be
	// printed or served.
	secrets []string
	// read returns the messages that arrived so far.
	read func(t *testing.T) []sinkMsg
	// where is what an entry of topic orders and key k arrives under.
	where func(key string) string
	// refusal is what the reason of the parked entry holds.
	refusal []string
}

func TestRelaySinkURLEndToEnd(t *testing.T) {
	t.Parallel()
	t.Run("NATS", func(t *testing.T) {
		t.Parallel()
		relaySinkEndToEnd(t, natsBroker(t))
	})
	t.Run("RabbitMQ", func(t *testing.T) {
		t.Parallel()
		relaySinkEndToEnd(t, amqpBroker(t))
	})
}

// natsBroker makes a stream capturing the subjects "<prefix>orders.>" on
// the test's NATS server; the relay publishes there with
// --nats-subject-map. A password is added to the URL when it has none (a
// server without authentication ignores it), so that the test sees it
// kept out of every output.
func natsBroker(t *testing.T) *sinkBroker {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		testenv.Unavailable(t, "NATS", "OUTBOX_NATS_URL", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tag := relayRandom()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "CLI_" + tag, Subjects: []string{"cli" + tag + ".orders"}, Storage: jetstream.MemoryStorage, Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatalf("creating the stream (is JetStream on: nats-server -js?): %v", err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), "CLI_"+tag) })
	u, err := url.Parse(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	pass := "Nats-Secret-" + tag
	var secrets []string
	if u.User == nil {
		u.User = url.UserPassword("relay", pass)
		secrets = append(secrets, pass)
	} else if p, ok := u.User.Password(); ok {
		secrets = append(secrets, p)
	}
	b := &sinkBroker{
		name: "NATS",
		args: []string{"--sink-url", u.String(), "--nats-subject-map", "orders=cli" + tag + ".orders",
			"--nats-subject-prefix", "cli" + tag + ".unmapped.", "--nats-publish-timeout", "1s"},
		secrets: secrets,
		where:   func(string) string { return "cli" + tag + ".orders" },
		refusal: []string{"cli" + tag + ".unmapped.", "--nats-subject-prefix or --nats-subject-map"},
	}
	var seen []sinkMsg
	b.read = func(t *testing.T) []sinkMsg {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for seq := uint64(len(seen) + 1); ; seq++ {
			m, err := stream.GetMsg(ctx, seq)
			if err != nil {
				return seen // no such message yet
			}
			h := map[string]string{}
			for k := range m.Header {
				h[k] = m.Header.Get(k)
			}
			seen = append(seen, sinkMsg{id: h["Nats-Msg-Id"], key: h["outbox-key"], payload: string(m.Data), headers: h, where: m.Subject})
		}
	}
	return b
}

// amqpBroker makes a topic exchange and a queue bound to it with "#" on
// the test's RabbitMQ; the relay publishes there with --amqp-exchange-map
// and the routing key "{topic}.{key}". The URL's password is given with
// --amqp-password instead.
func amqpBroker(t *testing.T) *sinkBroker {
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", "OUTBOX_AMQP_URL", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	tag := relayRandom()
	exchange, queue := "cli_x_"+tag, "cli_q_"+tag
	if err := ch.ExchangeDeclare(exchange, "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(queue, false, false, false)
			_ = c.ExchangeDelete(exchange, false, false)
		}
	})
	deliveries, err := ch.Consume(queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--amqp-exchange-map", "orders=" + exchange, "--amqp-exchange-prefix", "cli_missing_" + tag + ".",
		"--amqp-routing-key", "{topic}.{key}", "--amqp-publish-timeout", "1s"}
	var secrets []string
	if p, ok := u.User.Password(); ok {
		u.User = url.User(u.User.Username())
		args = append(args, "--amqp-password", p)
		if len(p) >= 8 { // a short one (guest) is masked wherever it appears, the user name included
			secrets = append(secrets, p)
		}
	}
	b := &sinkBroker{
		name:    "RabbitMQ",
		args:    append([]string{"--sink-url", u.String()}, args...),
		secrets: secrets,
		where:   func(key string) string { return "orders." + key },
		refusal: []string{"cli_missing_" + tag + "."},
	}
	var mu sync.Mutex
	var seen []sinkMsg
	go func() {
		for d := range deliveries {
			h := map[string]string{}
			for k, v := range d.Headers {
				h[k] = fmt.Sprint(v)
			}
			mu.Lock()
			seen = append(seen, sinkMsg{id: d.MessageId, key: strings.TrimPrefix(d.RoutingKey, "orders."), payload: string(d.Body), headers: h, where: d.RoutingKey})
			mu.Unlock()
		}
	}()
	b.read = func(*testing.T) []sinkMsg {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	return b
}

// relaySinkEndToEnd runs the relay on a PostgreSQL outbox into b.
func relaySinkEndToEnd(t *testing.T, b *sinkBroker) {
	ctx := context.Background()
	storeURL, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	if err := pgoutbox.Migrate(ctx, pool, pgoutbox.Options{Schema: schema, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	store, err := pgoutbox.New(ctx, pool, pgoutbox.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	var committed []outbox.Entry
	for i := range 30 {
		committed = append(committed, outbox.Entry{ID: fmt.Sprintf("e2e-%02d", i), Topic: "orders", Key: fmt.Sprintf("k%d", i%3),
			Payload: fmt.Appendf(nil, `{"n":%d}`, i), Headers: map[string]string{"content-type": "application/json"}})
	}
	appendPG := func(entries ...outbox.Entry) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := store.AppendInTx(ctx, tx, entries...); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := appendPG(committed...); err != nil {
		t.Fatal(err)
	}

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	run := startCLI(t, append([]string{"relay", "--store", storeURL, "--schema", schema, "--poll-interval", "100ms",
		"--metrics-addr", addr, "--log-format", "json"}, b.args...)...)
	run.waitFor(t, regexp.MustCompile(`(outbox relay: running)`))

	// Every entry arrives, with its ID, key, payload and headers, each key
	// in order.
	var got []sinkMsg
	for deadline := time.Now().Add(60 * time.Second); len(got) < len(committed); time.Sleep(50 * time.Millisecond) { // watchdog
		if got = b.read(t); time.Now().After(deadline) {
			t.Fatalf("%d of %d entries arrived within a minute\n%s", len(got), len(committed), run.errs)
		}
	}
	checkSinkMessages(t, b, committed, got)

	ready := func() (int, relaycmd.ReadyReport, string) {
		t.Helper()
		code, body := httpGet(t, "http://"+addr+"/readyz")
		var rep relaycmd.ReadyReport
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatalf("/readyz: %v: %s", err, body)
		}
		return code, rep, body
	}
	waitReady := func(want int) (relaycmd.ReadyReport, string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) { // watchdog
			code, rep, body := ready()
			if code == want {
				return rep, body
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz stayed %d (want %d): %s\n%s", code, want, body, run.errs)
			}
		}
	}
	rep, body := waitReady(http.StatusOK)
	if !rep.Sink.OK || rep.SinkName != b.name || rep.Kafka != nil || strings.Contains(body, `"kafka"`) {
		t.Errorf("/readyz of a relay publishing to %s: %s", b.name, body)
	}

	// An entry the broker refuses is parked with a reason naming the
	// flags; with every publish failing, not ready after twice the
	// publish timeout (2s), and ready again after a success.
	if err := appendPG(outbox.Entry{ID: "refused-1", Topic: "nowhere", Key: "k9", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	rep, body = waitReady(http.StatusServiceUnavailable)
	if rep.Publish.OK || !strings.Contains(rep.Publish.Error, "every publish has failed") || !rep.Sink.OK {
		t.Errorf("/readyz while every publish fails: %s", body)
	}
	parked, err := store.Parked(ctx, "", 10)
	if err != nil || len(parked) != 1 || parked[0].ID != "refused-1" {
		t.Fatalf("parked %+v, %v; want the refused entry", parked, err)
	}
	for _, want := range b.refusal {
		if !strings.Contains(parked[0].LastError, want) {
			t.Errorf("the parked reason lacks %q: %s", want, parked[0].LastError)
		}
	}
	t.Logf("%s: parked reason: %s\n/readyz: %s", b.name, parked[0].LastError, body)
	if err := appendPG(outbox.Entry{ID: "after-1", Topic: "orders", Key: "k1", Payload: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	waitReady(http.StatusOK)
	_, metrics := httpGet(t, "http://"+addr+"/metrics")

	if code := run.finish(t); code != 0 {
		t.Fatalf("relay exited %d\n%s", code, run.errs)
	}
	logs := run.out.String() + run.errs.String()
	for _, secret := range b.secrets {
		for what, text := range map[string]string{"the log": logs, "/readyz": body, "/metrics": metrics} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows the password %q", what, secret)
			}
		}
	}
	kind := map[string]string{"NATS": "nats", "RabbitMQ": "amqp"}[b.name]
	if !strings.Contains(logs, `"sink":"`+kind+`"`) || !strings.Contains(logs, `"`+kind+`_url":"`+kindScheme(b.args[1])) {
		t.Errorf("the start log line does not name the sink and its URL:\n%s", logs)
	}
}

// checkSinkMessages checks the messages read back against the entries:
// each entry once at least, with its key, payload, headers and place, and
// each key's entries in append order.
func checkSinkMessages(t *testing.T, b *sinkBroker, committed []outbox.Entry, got []sinkMsg) {
	t.Helper()
	byID := map[string]outbox.Entry{}
	for _, e := range committed {
		byID[e.ID] = e
	}
	last := map[string]string{}
	for _, m := range got {
		e, ok := byID[m.id]
		if !ok {
			t.Errorf("a message with unknown ID %q arrived: %+v", m.id, m)
			continue
		}
		if m.key != e.Key || m.payload != string(e.Payload) || m.headers["content-type"] != "application/json" ||
			m.headers["outbox-id"] != e.ID || m.where != b.where(e.Key) {
			t.Errorf("entry %s arrived as %+v", e.ID, m)
		}
		if prev, seen := last[e.Key]; seen && m.id < prev {
			t.Errorf("key %s: %s arrived after %s", e.Key, m.id, prev)
		}
		last[e.Key] = m.id
	}
}

// kindScheme is the scheme of a URL, with its "://".
func kindScheme(u string) string {
	scheme, _, _ := strings.Cut(u, "://")
	return scheme + "://"
}
