package app

// outbox demo --sink nats (an embedded NATS server, nothing installed) and
// --sink amqp (the test's RabbitMQ): the same checks as on Kafka, every
// number the run prints agreeing with the plan.

import (
	"net/url"
	"regexp"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox/internal/testenv"
)

func TestDemoOnNATS(t *testing.T) {
	t.Parallel()
	demoSmallRun(t, "embedded NATS JetStream (nats-server); seed", "NATS", "--sink", "nats")
}

// TestDemoOnRabbitMQ runs the demo on the test's RabbitMQ, on an exchange
// and a queue of its own, which it deletes at the end.
func TestDemoOnRabbitMQ(t *testing.T) {
	t.Parallel()
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", "OUTBOX_AMQP_URL", err)
	}
	defer conn.Close()
	d := demoSmallRun(t, "RabbitMQ at ", "RabbitMQ", "--sink", "amqp", "--sink-url", testenv.AMQPURL())
	out := d.text
	name := regexpFind(out, `exchange (outbox-demo-[0-9]+-[0-9a-f]{4});`)
	if name == "" {
		t.Fatalf("the run names no exchange of its own:\n%s", out)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive(name, false, false, false, false, nil); err == nil {
		t.Errorf("the demo left its queue %s behind", name)
	}
	if u, _ := url.Parse(testenv.AMQPURL()); u != nil {
		if p, ok := u.User.Password(); ok && len(p) >= 8 && strings.Contains(out, p) {
			t.Errorf("the demo printed the RabbitMQ password")
		}
	}
}

// TestDemoSinkErrors: --sink-url without --sink amqp is a usage error; a
// RabbitMQ that does not answer ends the run with exit 1, saying where
// the URL came from and how to change it, without its password.
func TestDemoSinkErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--sink", "nats", "--sink-url", "amqp://u:S3cretPW@h/"}, 2, []string{"--sink-url is the RabbitMQ of --sink amqp; --sink nats starts its own broker"}},
		{[]string{"--sink-url", "amqp://u:S3cretPW@h/"}, 2, []string{"--sink kafka starts its own broker"}},
		{[]string{"--sink", "sqs"}, 2, []string{"--sink"}},
		{[]string{"--sink", "amqp", "--sink-url", "amqp://u:S3cretPW@127.0.0.1:1/"}, 1, []string{"demo: connecting to RabbitMQ at amqp://u:xxxxx@127.0.0.1:1/ (from --sink-url)", "pass --sink-url URL or set OUTBOX_AMQP_URL"}},
	} {
		code, out, errs := runDemo(tc.args...)
		if code != tc.code || strings.Contains(out+errs, "S3cretPW") {
			t.Errorf("outbox demo %s: exit %d (want %d), and no password:\n%s%s", strings.Join(tc.args, " "), code, tc.code, out, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(errs, w) {
				t.Errorf("outbox demo %s: stderr lacks %q:\n%s", strings.Join(tc.args, " "), w, errs)
			}
		}
	}
}

// regexpFind is the first group of expr's first match in s, or "".
func regexpFind(s, expr string) string {
	if m := regexp.MustCompile(expr).FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}
