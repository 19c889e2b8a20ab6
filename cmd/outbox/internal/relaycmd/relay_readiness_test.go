package relaycmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// TestReadinessPublishFailing: /readyz's publish check is OK until every
// publish has failed for failAfter, then not OK with the time and the last
// error, and OK again once the sink has a record acknowledged; the change
// is logged once each way.
func TestReadinessPublishFailing(t *testing.T) {
	var since time.Time
	var last error
	var logs bytes.Buffer
	r := &relayReadiness{
		log: slog.New(slog.NewTextHandler(&logs, nil)), ttl: time.Hour, timeout: time.Second,
		store: func(context.Context) error { return nil }, sink: func(context.Context) error { return nil },
		sinkName: "Kafka", kafkaCompat: true, timeoutFlag: "--kafka-publish-timeout",
		failing: func() (time.Time, error) { return since, last }, failAfter: 10 * time.Second,
		scrub: func(s string) string { return strings.ReplaceAll(s, "Secret-77", "[REDACTED]") },
	}
	r.check(context.Background())
	check := func(wantOK bool, want ...string) ReadyProbe {
		t.Helper()
		p := r.publishProbe()
		if p.OK != wantOK {
			t.Fatalf("publish check OK = %v, want %v: %+v", p.OK, wantOK, p)
		}
		for _, w := range want {
			if !strings.Contains(p.Error, w) {
				t.Errorf("publish check error lacks %q: %s", w, p.Error)
			}
		}
		r.logPublish()
		return p
	}
	check(true)
	since, last = time.Now().Add(-9*time.Second), errors.New("topic unknown")
	check(true) // failing, but for less than failAfter
	since = time.Now().Add(-11 * time.Second)
	last = errors.New(`kafkasink: publish entry e1: topic "orders" unknown to the brokers; password Secret-77`)
	p := check(false, "every publish has failed for 11s", "not ready after 10s, twice --kafka-publish-timeout", `topic "orders"`)
	if strings.Contains(p.Error, "Secret-77") {
		t.Errorf("the publish check shows a secret: %s", p.Error)
	}
	check(false) // still failing: logged once
	since, last = time.Time{}, nil
	check(true)
	check(true)
	if n := strings.Count(logs.String(), "every publish has failed for a while"); n != 1 {
		t.Errorf("%d WARN lines for the failing publishes, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "publishing works again"); n != 1 {
		t.Errorf("%d INFO lines for the recovery, want 1:\n%s", n, logs.String())
	}
	r.failing = nil
	check(true) // no sink to judge (before the relay starts)
}

// TestReadinessReportNeedsPublishing: a relay that runs, with the store and
// Kafka answering, is not ready while every publish has failed for
// failAfter.
func TestReadinessReportNeedsPublishing(t *testing.T) {
	failing := time.Now().Add(-time.Minute)
	r := &relayReadiness{
		log: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), ttl: time.Hour, timeout: time.Second,
		store: func(context.Context) error { return nil }, sink: func(context.Context) error { return nil },
		sinkName: "Kafka", kafkaCompat: true, timeoutFlag: "--kafka-publish-timeout",
		failing: func() (time.Time, error) { return failing, errors.New("boom") }, failAfter: 10 * time.Second,
		scrub: func(s string) string { return s },
	}
	r.check(context.Background())
	r.stopping = true // a state the report sets without a relay
	rep := r.report(context.Background())
	if rep.Ready || rep.Publish.OK || !rep.Kafka.OK || !rep.Sink.OK || !rep.Store.OK {
		t.Errorf("report while every publish fails: %+v", rep)
	}
}

// TestReadinessReportNamesTheSink: /readyz's sink member is the broker's
// check whatever the broker, sink_name names it, and the kafka member
// (the name /readyz had before other brokers) is there with the Kafka
// sink only; a broker that does not answer makes the relay not ready and
// is logged under its name.
func TestReadinessReportNamesTheSink(t *testing.T) {
	for _, tc := range []struct {
		name        string
		kafkaCompat bool
	}{{"Kafka", true}, {"NATS", false}, {"RabbitMQ", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			r := &relayReadiness{
				log: slog.New(slog.NewTextHandler(&logs, nil)), ttl: time.Hour, timeout: time.Second,
				store:    func(context.Context) error { return nil },
				sink:     func(context.Context) error { return errors.New("connection refused") },
				sinkName: tc.name, kafkaCompat: tc.kafkaCompat, scrub: func(s string) string { return s },
			}
			r.check(context.Background())
			r.stopping = true
			rep := r.report(context.Background())
			if rep.Ready || rep.Sink.OK || rep.Sink.Error != "connection refused" || rep.SinkName != tc.name {
				t.Errorf("report while %s does not answer: %+v", tc.name, rep)
			}
			if (rep.Kafka != nil) != tc.kafkaCompat || (rep.Kafka != nil && *rep.Kafka != rep.Sink) {
				t.Errorf("the kafka member is %+v; want it (equal to sink) only with Kafka", rep.Kafka)
			}
			body, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(body), `"kafka"`) != tc.kafkaCompat || !strings.Contains(string(body), `"sink":{"ok":false`) {
				t.Errorf("/readyz body: %s", body)
			}
			if !strings.Contains(logs.String(), "outbox relay: "+tc.name+" is not reachable") {
				t.Errorf("the log does not name %s:\n%s", tc.name, logs.String())
			}
		})
	}
}

// relayFlagNames are the relay's flags, "--name", embedded structs'
// included.
func relayFlagNames(ty reflect.Type) map[string]bool {
	flags := map[string]bool{}
	for i := range ty.NumField() {
		f := ty.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			maps.Copy(flags, relayFlagNames(f.Type))
		}
		if n := f.Tag.Get("name"); n != "" {
			flags["--"+n] = true
		}
	}
	return flags
}

// TestSinkOptionFlagsExist: every flag the sinks' messages name under the
// relay command is a flag of it, and the options the command sets from
// flags are named by them, for each sink.
func TestSinkOptionFlagsExist(t *testing.T) {
	flags := relayFlagNames(reflect.TypeOf(RelayCmd{}))
	for _, sink := range []struct {
		name    string
		optName func(string) string
		options []string
	}{
		{"Kafka", (&RelayCmd{}).SinkOptions().OptionName, []string{"UnknownTopicTimeout", "PublishTimeout", "TransactionalIDPrefix", "Topic", kafkasink.OptionAutoTopicCreation}},
		{"NATS", (&RelayCmd{}).NATSOptions().OptionName, []string{"Subject", "PublishTimeout", "MaxPending"}},
		{"RabbitMQ", (&RelayCmd{}).AMQPOptions().OptionName, []string{"Exchange", "RoutingKeyTemplate", "PublishTimeout", "Channels", "MaxPending"}},
	} {
		for _, o := range sink.options {
			got := sink.optName(o)
			if got == "" {
				t.Errorf("%s option %s has no flag name", sink.name, o)
			}
			for _, f := range regexp.MustCompile(`--[a-z-]+`).FindAllString(got, -1) {
				if !flags[f] {
					t.Errorf("%s option %s is named %q, but %s is no flag of outbox relay", sink.name, o, got, f)
				}
			}
		}
		if got := sink.optName("LandingBound"); got != "" {
			t.Errorf("%s: LandingBound, which no flag sets, is named %q; want the sink's default", sink.name, got)
		}
	}
}

// TestKfakeScriptAgreesWithTheRelay: scripts/kfake.sh starts a broker that
// creates topics on demand and tells the user to run the relay with the
// flag that asks for it (the relay's default is off).
func TestKfakeScriptAgreesWithTheRelay(t *testing.T) {
	b, err := os.ReadFile("../../../../scripts/kfake.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	for _, want := range []string{"-auto-create", `run the relay with: --kafka-brokers $(cat "$ADDRFILE") --kafka-auto-create-topics`, "--kafka-unknown-topic-timeout"} {
		if !strings.Contains(script, want) {
			t.Errorf("scripts/kfake.sh lacks %q", want)
		}
	}
	f, ok := reflect.TypeOf(RelayCmd{}).FieldByName("KafkaAutoCreate")
	if !ok || f.Tag.Get("name") != "kafka-auto-create-topics" || f.Tag.Get("default") != "" {
		t.Errorf("the relay's --kafka-auto-create-topics is not the off-by-default flag the script names: %+v", f.Tag)
	}
}
