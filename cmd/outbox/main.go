// Command outbox runs relays, migrates and administers outboxes, and runs
// a self-checking demo.
//
//	outbox relay   --store URL --sink-url kafka://HOSTS|nats://HOST|amqp://HOST/VHOST [--metrics-addr :9464]
//	outbox migrate up|down|status|sql --store URL [--partitions N]
//	outbox status|parked|show|requeue|cancel|purge --store URL [flags] [IDs]
//	outbox ui      --store URL [--addr 127.0.0.1:8080] [--read-only] [--token TOKEN]
//	outbox demo [flags] [--sink kafka|nats|amqp] [--ui]
//	outbox version | help [COMMAND | stores | config]
//
// The store is named by --store URL, the OUTBOX_STORE variable or store:
// in a YAML file given by --config (flags override the environment, which
// overrides the file); 'outbox help stores' lists the URL forms and
// 'outbox help config' the file.
//
// The demo needs nothing but Go: it appends entries in transactions to the
// in-memory backend, runs relays that publish to an in-process Kafka
// (franz-go's kfake) through the Kafka sink (or, with --sink nats, to an
// embedded NATS server with JetStream through the NATS sink) while
// failures are injected,
// consumes the topic back and checks that every committed entry arrived
// (or was parked), in per-key order, and that nothing from a rolled-back
// transaction did. It exits 1 if any entry was lost or reordered.
//
// Exit status: 0 success, 1 failure, 2 usage error.
//
// The command's code is under internal/: app wires the command families
// (relaycmd, admincmd, movecmd, uicmd, demo) over cli, what they share.
package main

import (
	"os"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/app"
)

// version is set at build time (-ldflags "-X main.version=v1.2.3"); a build
// from a module uses the module version.
var version = ""

func main() {
	os.Exit(app.Main(os.Args[1:], os.Stdout, os.Stderr, version))
}
