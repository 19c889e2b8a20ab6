package cli

// Store errors explained: what a connection or backend error means for
// the store URL, and the fix, never with a password in the text.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// Explain turns a store error into one that names the problem and the fix.
// The result wraps err (for errors.Is) and holds no password.
func (t *StoreTarget) Explain(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &RedactedError{Msg: fmt.Sprintf("no answer from %s in time (%v): check that the host and port are right and reachable, or raise --timeout", t.Where, rootMessage(err)), Err: err}
	}
	msg := t.describe(err)
	if msg == "" {
		return Redact(err, t.Where)
	}
	return &RedactedError{Msg: RedactText(msg), Err: err}
}

// describe returns the explanation of a known store error, or "".
func (t *StoreTarget) describe(err error) string {
	hosts := strings.Join(t.hosts, ",")
	var recErr tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var verifyErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &recErr):
		if t.Kind == "redis" {
			return fmt.Sprintf("the Redis server at %s does not speak TLS (the TLS handshake got a plain-text answer): use redis:// instead of rediss:// (or the +sentinel/+cluster forms without the s), or enable TLS on the server", hosts)
		}
		return fmt.Sprintf("the server at %s does not speak TLS: check the port, or set sslmode=disable", hosts)
	case errors.As(err, &hostErr):
		return fmt.Sprintf("the server certificate at %s is not valid for the name dialled (%v): connect by a name the certificate holds, or set %s", hosts, hostErr.Error(), t.serverNameParam())
	case errors.As(err, &unknownCA), errors.As(err, &verifyErr) && verifyErr != nil:
		return fmt.Sprintf("the server certificate at %s is not signed by a trusted CA (%s): give the CA with %s", hosts, rootMessage(err), t.caParam())
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing listens at %s (connection refused): check the host and port in the store URL, and that the server runs", hosts)
	}
	switch t.Kind {
	case "postgres":
		return t.describePostgres(err)
	case "mysql":
		return t.describeMySQL(err)
	}
	return t.describeRedis(err)
}

func (t *StoreTarget) serverNameParam() string {
	if t.Kind == "postgres" || t.Kind == "mysql" {
		return "sslmode=verify-ca (which checks the CA only)"
	}
	return "tls_server_name=NAME in the URL"
}

func (t *StoreTarget) caParam() string {
	if t.Kind == "postgres" || t.Kind == "mysql" {
		return "sslrootcert=FILE in the URL"
	}
	return "tls_ca=FILE in the URL (a PEM file)"
}

func (t *StoreTarget) describePostgres(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01": // invalid_password
			return fmt.Sprintf("PostgreSQL at %s rejected the password of user %q (28P01 invalid_password): correct the password in the store URL (--store, OUTBOX_STORE or store: in the --config file), PGPASSWORD or ~/.pgpass", t.hosts[0], t.user)
		case "28000": // invalid_authorization_specification
			return fmt.Sprintf("PostgreSQL at %s refused user %q (28000: %s): check the user name, and that pg_hba.conf lets it connect from this host with this sslmode", t.hosts[0], t.user, pgErr.Message)
		case "3D000": // invalid_catalog_name
			return fmt.Sprintf("PostgreSQL at %s has no such database (3D000: %s): fix the database name, the path of the store URL", t.hosts[0], pgErr.Message)
		case "42501": // insufficient_privilege
			return fmt.Sprintf("user %q may not do this (42501: %s): grant it the privileges on the outbox's schema and tables (USAGE on the schema; SELECT, INSERT, UPDATE, DELETE on the tables; CREATE for outbox migrate)", t.user, pgErr.Message)
		case "26000", "08P01":
			if strings.Contains(pgErr.Message, "prepared statement") {
				return fmt.Sprintf("the server lost a prepared statement (%s): behind PgBouncer in transaction pooling mode, add default_query_exec_mode=simple_protocol to the store URL", pgErr.Message)
			}
		}
		return ""
	}
	if strings.Contains(err.Error(), "server refused TLS connection") {
		return fmt.Sprintf("PostgreSQL at %s does not accept TLS connections: set sslmode=disable (or prefer), or enable ssl on the server", t.hosts[0])
	}
	return ""
}

func (t *StoreTarget) describeRedis(err error) string {
	var rerr redis.Error
	hosts := strings.Join(t.hosts, ",")
	if s := err.Error(); strings.Contains(s, "all sentinels specified in configuration are unreachable") {
		if strings.HasSuffix(s, redis.Nil.Error()) {
			return fmt.Sprintf("the Sentinels at %s do not know the master named in the URL: check the master name, the path of the redis+sentinel:// URL (redis+sentinel://HOST:26379/MASTER)", hosts)
		}
		return fmt.Sprintf("none of the Sentinels at %s answered: check the hosts and ports (26379 by default), and sentinel_username/sentinel_password", hosts)
	}
	if errors.As(err, &rerr) {
		text := rerr.Error()
		word, _, _ := strings.Cut(text, " ")
		switch word {
		case "WRONGPASS":
			return fmt.Sprintf("Redis at %s rejected the user name or password (WRONGPASS): correct them in the store URL, written redis://USER:PASSWORD@HOST (or redis://:PASSWORD@HOST for the default user)", hosts)
		case "NOAUTH":
			return fmt.Sprintf("Redis at %s requires a password (NOAUTH): put it in the store URL, redis://:PASSWORD@HOST or redis://USER:PASSWORD@HOST", hosts)
		case "NOPERM":
			return fmt.Sprintf("the Redis user %s may not run what the outbox needs (%s): the outbox runs Lua scripts (SCRIPT LOAD, EVALSHA) on its own keys, so grant it, for example: ACL SETUSER %s %s",
				userOrDefault(t.user), text, userOrDefault(t.user), ACLRules(t.prefix))
		case "MOVED", "ASK":
			return fmt.Sprintf("the Redis server at %s is a Redis Cluster node (%s): name the cluster with %s://%s, not %s", hosts, text, t.clusterScheme(), hosts, t.Where)
		case "READONLY":
			return fmt.Sprintf("the Redis server at %s is a read-only replica (%s): point the store URL at the master, or use redis+sentinel:// to find it", hosts, text)
		case "ERR":
			switch {
			case strings.Contains(text, "cluster support disabled"):
				return fmt.Sprintf("the Redis server at %s is not a Cluster node (%s): for one server write redis://%s, for Sentinel redis+sentinel://", hosts, text, t.hosts[0])
			}
		}
		return ""
	}
	s := err.Error()
	switch {
	case t.tls && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return ""
	case !t.tls && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return fmt.Sprintf("the Redis server at %s closed the connection (%s): if it speaks TLS only, use rediss:// (or rediss+sentinel://, rediss+cluster://)", hosts, s)
	}
	return ""
}

func userOrDefault(u string) string {
	if u == "" {
		return "default"
	}
	return u
}

// ACLRules are the ACL rules a user of the outbox at prefix needs (see
// 'outbox help stores').
func ACLRules(prefix string) string {
	p := keyPattern(prefix)
	return "+@read +@write +@scripting +@connection +@pubsub +time +info ~" + p + " &" + p
}

// keyPattern is the ACL key pattern of a prefix's keys (partition keys
// extend the hash tag: {outbox:3}:entries).
func keyPattern(prefix string) string {
	if prefix == "" {
		prefix = "{outbox}"
	}
	if j := strings.IndexByte(prefix, '}'); j >= 0 {
		return prefix[:j] + "*"
	}
	return prefix + "*"
}

// rootMessage is the message of the innermost error, without the chain's
// prefixes.
func rootMessage(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}
