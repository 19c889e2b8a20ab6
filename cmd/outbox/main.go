// Command outbox runs the outbox demo and administers outboxes.
//
//	go run ./cmd/outbox demo [flags]
//	outbox status|parked|requeue|cancel -postgres URL|-redis URL [flags] [IDs]
//
// The demo needs nothing but Go: it appends entries in transactions to the
// in-memory backend, runs two relays that publish to an in-process Kafka
// (franz-go's kfake) through the Kafka sink while failures are injected,
// consumes the topic back and checks that every committed entry arrived
// (or was parked), in per-key order, and that nothing from a rolled-back
// transaction did. It exits 1 if any entry was lost or reordered.
package main

import (
	"fmt"
	"os"
)

func main() {
	args := os.Args[1:]
	cmd := "demo"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "demo":
		err = runDemo(args, os.Stdout)
	case "status", "parked", "requeue", "cancel":
		err = runAdmin(cmd, args, os.Stdout)
	case "help", "-h", "--help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "outbox: unknown command %q\n\n", cmd)
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: outbox <command> [flags]

commands:
  demo     append, relay to an in-process Kafka with injected failures, verify
           (run "outbox demo -h" for its flags)
  status   counts of an outbox: pending, due, parked, and the relay's lag
  parked   list parked (dead-letter) entries, a page at a time
  requeue  move parked entries back to pending: IDs, or -all
  cancel   delete pending or parked entries by ID

The admin commands name the outbox with -postgres URL, -redis URL or
-redis-cluster ADDRS, plus -partitions N (and -schema/-table or -prefix when
not the defaults); they work on any backend through the SPI's Inspector and
Canceler interfaces. Example:

  outbox parked -postgres postgres://app@db/app -partitions 8
`)
}
