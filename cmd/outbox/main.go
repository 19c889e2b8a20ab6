// Command outbox runs the outbox demo.
//
//	go run ./cmd/outbox demo [flags]
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
  demo    append, relay to an in-process Kafka with injected failures, verify
          (run "outbox demo -h" for its flags)
`)
}
