package relaycmd

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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
		store: func(context.Context) error { return nil }, kafka: func(context.Context) error { return nil },
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
	p := check(false, "every publish has failed for 11s", "not ready after 10s", `topic "orders"`)
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
		store: func(context.Context) error { return nil }, kafka: func(context.Context) error { return nil },
		failing: func() (time.Time, error) { return failing, errors.New("boom") }, failAfter: 10 * time.Second,
		scrub: func(s string) string { return s },
	}
	r.check(context.Background())
	r.stopping = true // a state the report sets without a relay
	rep := r.report(context.Background())
	if rep.Ready || rep.Publish.OK || !rep.Kafka.OK || !rep.Store.OK {
		t.Errorf("report while every publish fails: %+v", rep)
	}
}

// TestSinkOptionFlagsExist: every flag the sink's messages name under the
// relay command is a flag of it, and the options the command sets from
// flags are named by them.
func TestSinkOptionFlagsExist(t *testing.T) {
	flags := map[string]bool{}
	ty := reflect.TypeOf(RelayCmd{})
	for i := range ty.NumField() {
		if n := ty.Field(i).Tag.Get("name"); n != "" {
			flags["--"+n] = true
		}
	}
	name := (&RelayCmd{}).SinkOptions().OptionName
	for _, o := range []string{"UnknownTopicTimeout", "PublishTimeout", "TransactionalIDPrefix", "Topic", kafkasink.OptionAutoTopicCreation} {
		got := name(o)
		if got == "" {
			t.Errorf("option %s has no flag name", o)
		}
		for _, f := range regexp.MustCompile(`--[a-z-]+`).FindAllString(got, -1) {
			if !flags[f] {
				t.Errorf("option %s is named %q, but %s is no flag of outbox relay", o, got, f)
			}
		}
	}
	if got := name("LandingBound"); got != "" {
		t.Errorf("LandingBound, which no flag sets, is named %q; want the sink's default", got)
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
