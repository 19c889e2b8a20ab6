package testenv

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	neturl "net/url"
)

// The probes ask whether a server of the right kind answers at a URL, with
// the standard library alone (this package is imported by every test
// binary, so it pulls in no client): PostgreSQL must answer an SSLRequest,
// Redis a PING. They check that a server answers, not that the URL's
// credentials are right: a test that connects reports those.

// pingPostgres sends PostgreSQL's SSLRequest, which every server answers
// with one byte, S or N, before any authentication.
func pingPostgres(ctx context.Context, url string) error {
	return probe(ctx, url, "5432", sslRequest(), func(b byte) bool { return b == 'S' || b == 'N' })
}

// pingRedis sends PING; a Redis server answers +PONG, or an error (-NOAUTH)
// when it wants a password: either is a server answering.
func pingRedis(ctx context.Context, url string) error {
	return probe(ctx, url, "6379", []byte("*1\r\n$4\r\nPING\r\n"), func(b byte) bool { return b == '+' || b == '-' })
}

// pingNATS reads the INFO line a NATS server sends first, before any
// authentication.
func pingNATS(ctx context.Context, url string) error {
	return probe(ctx, url, "4222", nil, func(b byte) bool { return b == 'I' })
}

// pingAMQP sends the AMQP 0-9-1 protocol header; a RabbitMQ server answers
// with a method frame (type 1, Connection.Start).
func pingAMQP(ctx context.Context, url string) error {
	return probe(ctx, url, "5672", []byte("AMQP\x00\x00\x09\x01"), func(b byte) bool { return b == 1 })
}

// pingMySQL reads the first packet a MySQL or MariaDB server sends: a
// handshake (protocol version 10 after the 4-byte packet header), or an
// error packet (0xff) when the server refuses the client's host, which
// still means a server answers there.
func pingMySQL(ctx context.Context, url string) error {
	return probeN(ctx, url, "3306", nil, 5, func(b []byte) bool { return b[4] == 10 || b[4] == 0xff })
}

// probe dials url's host (port defaultPort when it names none), writes
// hello (if any) and reads one byte, which answered must accept.
func probe(ctx context.Context, url, defaultPort string, hello []byte, answered func(byte) bool) error {
	return probeN(ctx, url, defaultPort, hello, 1, func(b []byte) bool { return answered(b[0]) })
}

// probeN is probe reading the first n bytes.
func probeN(ctx context.Context, url, defaultPort string, hello []byte, n int, answered func([]byte) bool) error {
	u, err := neturl.Parse(url)
	if err != nil {
		return fmt.Errorf("testenv: %s does not parse: %v", redact(url), err)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = defaultPort
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return err
	}
	defer c.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(deadline)
	}
	if len(hello) > 0 {
		if _, err := c.Write(hello); err != nil {
			return err
		}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return fmt.Errorf("no answer from %s: %v", c.RemoteAddr(), err)
	}
	if !answered(b) {
		return fmt.Errorf("%s answered %q, which is not the server expected there", c.RemoteAddr(), b)
	}
	return nil
}

// redact returns u with its password replaced, for messages.
func redact(u string) string {
	if pu, err := neturl.Parse(u); err == nil {
		return pu.Redacted()
	}
	return "(a URL that does not parse)"
}

// sslRequest is PostgreSQL's SSLRequest message: its length, 8, and the
// request code 80877103, both big-endian 32-bit integers.
func sslRequest() []byte {
	msg := binary.BigEndian.AppendUint32(nil, 8)
	return binary.BigEndian.AppendUint32(msg, 80877103)
}
