// Command kfakebroker runs franz-go's in-memory Kafka (kfake) as a process
// of its own, on 127.0.0.1 and ports it picks, so tests and scripts can run
// `outbox relay` against a broker that lives and dies apart from them.
//
//	kfakebroker [-brokers 1] [-topics t1,t2] [-partitions 4] [-auto-create]
//	            [-sasl PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 -sasl-user NAME]
//	            [-tls-cert FILE -tls-key FILE] [-exit-on-stdin-eof]
//	            [-control-file FILE]
//
// Once the brokers listen it prints their addresses on one line of standard
// output, comma-separated (what `outbox relay --kafka-brokers` takes), and
// runs until SIGTERM or SIGINT (or, with -exit-on-stdin-eof, until its
// standard input ends, so a test that dies takes its broker with it). That
// line is all it ever writes to standard output; errors go to standard
// error. The SASL password comes from the environment variable
// KFAKE_SASL_PASSWORD, never from the command line. Nothing is persisted.
//
// # Fault injection
//
// With -control-file FILE it also serves a small HTTP API on 127.0.0.1 at a
// port it picks, and once that listens (after the broker line is printed)
// writes its address (host:port and a newline) to FILE, through a
// temporary name and a rename so a reader never sees part of it:
//
//	curl -X POST "http://$(cat FILE)/produce-errors?count=3&code=NOT_ENOUGH_REPLICAS"
//
// Parameters go in the query string; an unknown or repeated parameter, a
// missing one or a bad value is answered 400 with a message saying what to
// give. A successful call is answered 200 with JSON saying what it armed
// and everything armed after it. Arming is cumulative: two calls of count 2
// fault the next 4 requests, in the order armed. Each fault applies to
// Produce requests only (the relay's publish path; metadata, fetches and
// the harness's own reads are never faulted), on every broker, and each
// Produce request takes at most one fault: an armed drop first, then an
// error, then a delay.
//
//   - POST /produce-errors?count=N&code=NAME: the next N Produce requests
//     are answered with the Kafka error NAME (a kerr name such as
//     NOT_ENOUGH_REPLICAS, NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT) in
//     every partition of the request, with base offset -1, and nothing is
//     written. The client sees that error per partition; franz-go retries
//     a retriable one (refreshing metadata first for NOT_LEADER_*) and
//     fails the records on one that is not.
//   - POST /produce-delay?count=N&delay=DURATION: the next N Produce
//     requests are held for DURATION (a Go duration, at most 10m), then
//     handled as usual: written and answered. The hold uses kfake's
//     SleepControl, which parks only the held request's connection: later
//     requests on that connection wait behind it (Kafka answers a
//     connection's requests in order, and kfake reads the next request of
//     a connection only after answering the previous), while every other
//     connection and broker is served meanwhile. franz-go sends produce
//     requests on a connection of their own, so a held produce does not
//     hold the same client's metadata or fetches. A delay longer than the
//     client's produce timeout (franz-go: ProduceRequestTimeout plus
//     RequestTimeoutOverhead, 10s+10s by default) makes the client give up
//     and close the connection while the broker still writes the records
//     afterwards: written but unacknowledged, so a retry without the
//     idempotent producer duplicates them.
//   - POST /drop-connections?count=N: the next N Produce requests are not
//     answered; the broker closes their connection (the control function
//     returns an error, which makes kfake close it) and writes nothing.
//     The client sees the connection end with its request in flight (an
//     EOF or reset), reconnects and retries; the idempotent producer keeps
//     its sequence numbers, so the records land once.
//   - POST /reset: disarms everything not yet applied and releases the
//     requests being held by a delay, which are then written as usual.
//     The body says what it disarmed.
//   - GET /stats: {"applied":{...},"armed":{...}}, the faults applied since
//     the broker started (produce_errors, produce_delays,
//     dropped_connections; /reset does not clear them) and those still
//     armed (produce_errors, produce_delays, drop_connections).
//
// The API is safe for concurrent use. It has no authentication: it listens
// on the loopback interface only, for tests.
package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kfakebroker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kfakebroker", flag.ContinueOnError)
	brokers := fs.Int("brokers", 1, "number of brokers")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	partitions := fs.Int("partitions", 4, "partitions of each topic created at start, and of auto-created topics")
	autoCreate := fs.Bool("auto-create", false, "let clients create topics by producing to them")
	mech := fs.String("sasl", "", "require SASL with this mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (password from KFAKE_SASL_PASSWORD)")
	user := fs.String("sasl-user", "", "the SASL user (with -sasl)")
	certFile := fs.String("tls-cert", "", "serve TLS with this certificate (PEM; with -tls-key)")
	keyFile := fs.String("tls-key", "", "the TLS certificate's private key (PEM)")
	stdinEOF := fs.Bool("exit-on-stdin-eof", false, "exit when standard input ends")
	controlFile := fs.String("control-file", "", "serve the fault-injection API on 127.0.0.1 and write its address to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	opts := []kfake.Opt{kfake.NumBrokers(*brokers), kfake.DefaultNumPartitions(*partitions)}
	if *topics != "" {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), strings.Split(*topics, ",")...))
	}
	if *autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	switch *mech {
	case "":
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		pass := os.Getenv("KFAKE_SASL_PASSWORD")
		if *user == "" || pass == "" {
			return errors.New("-sasl needs -sasl-user and the password in KFAKE_SASL_PASSWORD")
		}
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(*mech, *user, pass))
	default:
		return fmt.Errorf("-sasl %q: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", *mech)
	}
	if *certFile != "" || *keyFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("loading -tls-cert and -tls-key: %w", err)
		}
		opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	}
	// Catch the signals before printing the broker line: a caller that
	// reads the line and at once sends SIGTERM gets a clean exit.
	done := make(chan os.Signal, 1)
	signal.Notify(done, syscall.SIGTERM, syscall.SIGINT)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	var controlAddr string
	if *controlFile != "" {
		in := newInjector(c)
		defer in.close() // before c.Close: held requests go first
		addr, stop, err := controlServer(in)
		if err != nil {
			return err
		}
		defer stop()
		controlAddr = addr
	}
	if _, err := fmt.Println(strings.Join(c.ListenAddrs(), ",")); err != nil {
		return err
	}
	if *controlFile != "" {
		if err := writeFileAtomic(*controlFile, controlAddr+"\n"); err != nil {
			return fmt.Errorf("-control-file: %w", err)
		}
	}

	if *stdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
			done <- syscall.SIGTERM
		}()
	}
	<-done
	return nil
}
