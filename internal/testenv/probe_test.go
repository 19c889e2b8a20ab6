package testenv

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"
)

func TestSSLRequest(t *testing.T) {
	t.Parallel()
	b := sslRequest()
	if len(b) != 8 || binary.BigEndian.Uint32(b) != 8 || binary.BigEndian.Uint32(b[4:]) != 80877103 {
		t.Fatalf("sslRequest() = %x", b)
	}
}

// The probes against the real servers: the local defaults answer on every
// machine that runs the suite with services, and a port nobody listens on
// does not; a server of the other kind is not taken for the one asked for.
func TestProbes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		ping     func(context.Context, string) error
		url      string
		other    string // a server of the other kind
		variable string
	}{
		{"PostgreSQL", pingPostgres, PostgresURL(), RedisURL(), "OUTBOX_POSTGRES_URL"},
		{"Redis", pingRedis, RedisURL(), PostgresURL(), "OUTBOX_REDIS_URL"},
		{"NATS", pingNATS, NATSURL(), RedisURL(), "OUTBOX_NATS_URL"},
		{"RabbitMQ", pingAMQP, AMQPURL(), NATSURL(), "OUTBOX_AMQP_URL"},
		{"MySQL", pingMySQL, MySQLURL(), NATSURL(), "OUTBOX_MYSQL_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			defer cancel()
			if err := tc.ping(ctx, tc.url); err != nil {
				Unavailable(t, tc.name, tc.variable, err)
			}
			if err := tc.ping(ctx, "x://127.0.0.1:1/"); err == nil {
				t.Error("a server answers on port 1")
			}
			if err := tc.ping(ctx, tc.other); err == nil {
				t.Errorf("the %s probe took %s for its server", tc.name, redact(tc.other))
			}
		})
	}
}

// A listener that accepts and says nothing is not a server answering.
func TestProbeSilentListener(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = pingRedis(ctx, "redis://"+l.Addr().String()+"/0")
	if err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("pingRedis on a silent listener = %v, want no answer", err)
	}
}
