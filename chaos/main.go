// Command chaos is the project's chaos harness: it runs relays, appenders,
// a broker (kfake for the Kafka sink, or a private nats-server or RabbitMQ
// node for the NATS and RabbitMQ sinks) and private database servers as
// processes on 127.0.0.1, injects faults (processes killed and stopped,
// connections terminated, servers and brokers crashed and restarted,
// broker errors, a Redis Cluster failover, relays joining and leaving),
// records what was committed and what the broker holds, and checks the
// histories with package
// [github.com/outboxrelay/outbox/chaos/history]: nothing committed lost,
// per-key order kept, duplicates per fault, recovery time per fault.
// The inbox/ scenarios also run consumer processes (`chaos
// inbox-consumer`, package internal/inboxconsumer) that apply the records
// through the inbox into an effect table, and check the effects with
// package internal/exactlyonce: every committed entry applied exactly
// once, in its key's order.
//
// Run it with ./scripts/chaos.sh (which builds it):
//
//	./scripts/chaos.sh -short             # every scenario briefly (CI)
//	./scripts/chaos.sh                     # the full run; writes docs/reliability.md
//	./scripts/chaos.sh -run 'relay-kill'   # scenarios whose name matches
//
// It signals only processes it started, by PID, terminates Postgres
// sessions only by its own application_name prefix, and kills MariaDB
// sessions only on its own private servers, by user and database. The
// shared PostgreSQL, Redis and MySQL come from OUTBOX_POSTGRES_URL,
// OUTBOX_REDIS_URL and OUTBOX_MYSQL_URL (defaults: the local servers);
// the private servers (PostgreSQL, Redis, MariaDB) it starts itself, the brokers
// with package internal/brokerproc (nats-server and rabbitmq-server from
// the Debian packages of those names: ./scripts/services.sh install).
//
// `chaos soak` (./scripts/soak.sh) is the soak run instead: hours of
// steady load with relay restarts and connection kills, a sample of every
// resource every 10 seconds, a trend check, a latency-window check and the
// history check, and its negative controls (the full run writes docs/soak.md).
//
// The exit status is 1 when a scenario inside the guarantees lost an
// entry, broke a key's order or delivered an entry never committed, when a
// negative control passed, or when a scenario could not run.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxrelay/outbox/chaos/internal/appender"
	"github.com/outboxrelay/outbox/chaos/internal/controlrelay"
	"github.com/outboxrelay/outbox/chaos/internal/inboxconsumer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "appender":
		err = appender.Main(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "control-relay":
		err = controlrelay.Main(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "soak":
		err = runSoak(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "inbox-consumer":
		err = inboxconsumer.Main(ctx, os.Args[2:])
	default:
		err = runHarness(ctx, os.Args[1:])
	}
	if err != nil {
		if !errors.Is(err, errFailed) {
			fmt.Fprintln(os.Stderr, "chaos:", err)
		}
		os.Exit(1)
	}
}
