package amqpsink_test

import (
	"flag"
	"os"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox/internal/testenv"
)

func TestMain(m *testing.M) {
	flag.Parse()
	examplesNeedRabbitMQ()
	code := m.Run()
	stopPrivateNode()
	os.Exit(code)
}

// examplesNeedRabbitMQ makes the Examples runnable or leaves them out.
// They publish to a real RabbitMQ and an Example cannot skip itself, so
// TestMain checks once that the server answers: when it does, the Examples
// read its URL from OUTBOX_AMQP_URL (set here when testenv found the
// server at its default); when it does not and OUTBOX_REQUIRE_SERVICES is
// not 1, they are left out through -test.skip, said on stderr.
func examplesNeedRabbitMQ() {
	url := testenv.AMQPURL()
	conn, err := amqp.Dial(url)
	if err == nil {
		_ = conn.Close()
		_ = os.Setenv("OUTBOX_AMQP_URL", url)
		return
	}
	if testenv.Required() {
		return
	}
	testenv.SkipExamples("amqpsink", "RabbitMQ", "no server answers ("+err.Error()+"); set OUTBOX_AMQP_URL or run ./scripts/services.sh start")
}
