// Command kfakebroker runs franz-go's in-memory Kafka (kfake) as a process
// of its own, on 127.0.0.1 and ports it picks, so tests and scripts can run
// `outbox relay` against a broker that lives and dies apart from them.
//
//	kfakebroker [-brokers 1] [-topics t1,t2] [-partitions 4] [-auto-create]
//	            [-sasl PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 -sasl-user NAME]
//	            [-tls-cert FILE -tls-key FILE] [-exit-on-stdin-eof]
//
// Once the brokers listen it prints their addresses on one line of standard
// output, comma-separated (what `outbox relay --kafka-brokers` takes), and
// runs until SIGTERM or SIGINT (or, with -exit-on-stdin-eof, until its
// standard input ends, so a test that dies takes its broker with it). The
// SASL password comes from the environment variable KFAKE_SASL_PASSWORD,
// never from the command line. Nothing is persisted.
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
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := fmt.Println(strings.Join(c.ListenAddrs(), ",")); err != nil {
		return err
	}

	done := make(chan os.Signal, 1)
	signal.Notify(done, syscall.SIGTERM, syscall.SIGINT)
	if *stdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
			done <- syscall.SIGTERM
		}()
	}
	<-done
	return nil
}
