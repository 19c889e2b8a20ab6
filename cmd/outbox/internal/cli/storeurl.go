package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// StoresHelp is the reference of the --store URL forms ('outbox help
// stores'); docs/operations.md quotes it.
const StoresHelp = `Store URLs (--store URL, OUTBOX_STORE, or store: in the --config file)

PostgreSQL
  postgres://[USER[:PASSWORD]@]HOST[:PORT][,HOST2[:PORT]...]/DATABASE[?PARAMS]
  postgresql://...   (the same)
  The URL goes to pgx as it is, so every libpq-style parameter works:
    sslmode=disable|allow|prefer|require|verify-ca|verify-full
    sslrootcert=FILE  sslcert=FILE  sslkey=FILE  sslpassword=...
    connect_timeout=SECONDS  application_name=NAME  target_session_attrs=read-write
    default_query_exec_mode=simple_protocol   (behind PgBouncer in transaction pooling mode)
  The password may also come from PGPASSWORD or ~/.pgpass, as with psql.
  Name the outbox with --schema (default public) and --table (default outbox).
  Example: postgres://app:PASSWORD@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem

MySQL and MariaDB (MySQL 8.0 and later, MariaDB 10.6 and later)
  mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS]
  mariadb://...   (the same)
  Port 3306 by default. The URL must name the database that holds the outbox.
  TLS parameters, with PostgreSQL's meanings:
    sslmode=disable|preferred|require|verify-ca|verify-full
        disable: plain text; preferred (the default): TLS when the server
        offers it, unverified; require: TLS, unverified; verify-ca: TLS, the
        certificate chain verified; verify-full: the chain and the host name
    sslrootcert=FILE  PEM CA certificates to verify against (default: the system's)
    sslcert=FILE  sslkey=FILE   a client certificate (mutual TLS)
  go-sql-driver/mysql's own parameters pass through: timeout=5s,
  readTimeout=30s, writeTimeout=30s, charset=utf8mb4, collation=NAME,
  maxAllowedPacket=N, compress=true, rejectReadOnly=true,
  connectionAttributes=K:V,... ; any other NAME=VALUE sets that session
  system variable on every connection (innodb_lock_wait_timeout=10). Refused:
  tls= (use sslmode), multiStatements, allowAllFiles, allowCleartextPasswords,
  allowOldPasswords, interpolateParams, parseTime, loc, clientFoundRows,
  columnsWithAlias.
  Name the outbox with --table (default outbox; its other tables are named
  after it: outbox_lease, outbox_meta, ...).
  The user needs SELECT, INSERT, UPDATE, DELETE on the outbox's tables
  (and CREATE, DROP, ALTER, INDEX for outbox migrate).
  Example: mysql://app:PASSWORD@db.internal:3306/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem

Redis, one server
  redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?PARAMS]      plain text (port 6379 by default)
  rediss://[[USER]:PASSWORD@]HOST[:PORT][/DB][?PARAMS]     TLS
  A password without a user (redis://:PASSWORD@host) authenticates as the default user.

Redis Sentinel
  redis+sentinel://[[USER]:PASSWORD@]SENTINEL[:PORT][,SENTINEL2[:PORT]...]/MASTER[/DB][?PARAMS]
  rediss+sentinel://...   TLS to the Sentinels and to the servers
  USER and PASSWORD are those of the Redis servers; the Sentinels' own, if they
  have any, go in sentinel_username=USER and sentinel_password=PASSWORD. MASTER is
  the master name the Sentinels monitor. Sentinel port 26379 by default.
  Example: redis+sentinel://:PASSWORD@s1:26379,s2:26379,s3:26379/mymaster/0

Redis Cluster
  redis+cluster://[[USER]:PASSWORD@]NODE[:PORT][,NODE2[:PORT]...][?PARAMS]
  rediss+cluster://...    TLS
  Give one or more nodes (go-redis's ?addr=NODE:PORT adds more too); the others
  are discovered. A Cluster has database 0 only.
  Example: rediss+cluster://app:PASSWORD@10.0.0.1:7000,10.0.0.2:7000

Redis parameters (every Redis form)
  tls_ca=FILE           PEM CA certificates to trust (default: the system's)
  tls_cert=FILE, tls_key=FILE   a client certificate (mutual TLS)
  tls_server_name=NAME  the name to verify the server certificates against
                        (default: the host each connection dials)
  skip_verify=true      do not verify the server certificate (tests only)
  go-redis's own, such as dial_timeout=5s, read_timeout=3s, pool_size=10,
  client_name=NAME, protocol=2|3.
  Name the outbox with --prefix (default {outbox}).
  A Redis ACL user of the outbox at prefix {orders} needs:
    +@read +@write +@scripting +@connection +@pubsub +time +info ~{orders* &{orders*

Special characters in a user name or password are percent-encoded (@ is %40,
: is %3A, / is %2F). Nothing the CLI prints shows a password: it is replaced
with xxxxx.
`

// StoreTarget is a parsed store URL, ready to connect.
type StoreTarget struct {
	// Kind is "postgres", "mysql" or "redis"; mode is "", "sentinel" or "cluster"
	// (Redis).
	Kind, mode string
	// Where is the URL with its password removed, for messages.
	Where string
	// hosts are the host:port pairs of the URL, for messages.
	hosts []string
	// user is the user name of the URL, for messages.
	user string
	tls  bool
	// prefix is the Redis outbox's prefix (--prefix), for messages.
	prefix string

	pg       *pgxpool.Config
	my       *mysql.Config
	single   *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
}

// ParseStore parses a store URL. Errors never repeat a password.
func ParseStore(raw string) (*StoreTarget, error) {
	if raw == "" {
		return nil, UsageError("no store given: pass --store URL, set OUTBOX_STORE, or put store: in the --config file (outbox help stores lists the URL forms)")
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || scheme == "" || strings.ContainsAny(scheme, "@/:") {
		return nil, UsageError("the store URL has no scheme: write it as postgres://USER@HOST:5432/DB, mysql://USER@HOST:3306/DB or redis://HOST:6379/0 (outbox help stores lists every form, with Sentinel, Cluster and TLS)")
	}
	t := &StoreTarget{Where: RedactText(raw)}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		t.Kind = "postgres"
		cfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			return nil, UsageError("the PostgreSQL URL does not parse: %s (outbox help stores shows its form)", RedactText(rootMessage(err), URLSecrets(raw)...))
		}
		if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
			cfg.ConnConfig.RuntimeParams["application_name"] = "outbox"
		}
		t.pg, t.user, t.tls = cfg, cfg.ConnConfig.User, cfg.ConnConfig.TLSConfig != nil
		t.hosts = []string{net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))}
		for _, fb := range cfg.ConnConfig.Fallbacks {
			if h := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))); h != t.hosts[len(t.hosts)-1] {
				t.hosts = append(t.hosts, h)
			}
		}
		return t, nil
	case "mysql", "mariadb":
		if err := t.parseMySQL(raw); err != nil {
			return nil, err
		}
		return t, nil
	case "redis", "rediss":
		t.Kind = "redis"
	case "redis+sentinel", "rediss+sentinel":
		t.Kind, t.mode = "redis", "sentinel"
	case "redis+cluster", "rediss+cluster":
		t.Kind, t.mode = "redis", "cluster"
	default:
		return nil, UsageError("unknown store URL scheme %q: use postgres://, postgresql://, mysql://, mariadb://, redis://, rediss://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster:// (outbox help stores)", scheme)
	}
	t.tls = strings.HasPrefix(strings.ToLower(scheme), "rediss")
	if err := t.parseRedis(rest); err != nil {
		return nil, err
	}
	return t, nil
}

// parseRedis parses what follows the scheme of a Redis URL.
func (t *StoreTarget) parseRedis(rest string) error {
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	authority, userinfo, err := t.cutUserinfo(authority)
	if err != nil {
		return err
	}
	if err := t.parseHosts(authority); err != nil {
		return err
	}
	u, err := url.Parse("x://h" + tail)
	if err != nil {
		return UsageError("the Redis URL does not parse after its hosts: %s", RedactText(rootMessage(err)))
	}
	q := u.Query()
	tlsOpts := map[string]string{}
	for _, k := range []string{"tls_ca", "tls_cert", "tls_key", "tls_server_name", "skip_verify"} {
		if q.Has(k) {
			tlsOpts[k] = q.Get(k)
			q.Del(k)
		}
	}
	path := strings.Trim(u.Path, "/")
	var tlsConfig **tls.Config
	switch t.mode {
	case "":
		tlsConfig, err = t.parseSingle(path, q, userinfo)
	case "sentinel":
		tlsConfig, err = t.parseSentinel(path, q, userinfo)
	case "cluster":
		tlsConfig, err = t.parseCluster(path, q, userinfo)
	}
	if err != nil {
		return err
	}
	return t.applyTLS(tlsConfig, tlsOpts)
}

// cutUserinfo cuts the user info off a Redis URL's authority, records
// its user name and returns the rest.
func (t *StoreTarget) cutUserinfo(authority string) (string, *url.Userinfo, error) {
	i := strings.LastIndexByte(authority, '@')
	if i < 0 {
		return authority, nil, nil
	}
	user, pass, hasPass := strings.Cut(authority[:i], ":")
	u, err1 := url.PathUnescape(user)
	p, err2 := url.PathUnescape(pass)
	if err1 != nil || err2 != nil {
		return "", nil, UsageError("the user name or password of the Redis URL has a bad %%-escape: percent-encode special characters (%% is %%25, @ is %%40)")
	}
	t.user = u
	if hasPass {
		return authority[i+1:], url.UserPassword(u, p), nil
	}
	return authority[i+1:], url.User(u), nil
}

// parseHosts records the comma-separated hosts of a Redis URL, with the
// default port of its mode where one is missing.
func (t *StoreTarget) parseHosts(authority string) error {
	defPort := "6379"
	if t.mode == "sentinel" {
		defPort = "26379"
	}
	for _, h := range strings.Split(authority, ",") {
		if h == "" {
			return UsageError("the Redis URL names no host (or has an empty one between commas): write redis://HOST:6379/0")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defPort)
		}
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return UsageError("the Redis URL has a bad host %q: write HOST:PORT", h)
		}
		t.hosts = append(t.hosts, h)
	}
	return nil
}

// redisURL rebuilds a go-redis URL of the first host with path and q.
func (t *StoreTarget) redisURL(path string, q url.Values) string {
	base := "redis"
	if t.tls {
		base = "rediss"
	}
	s := base + "://" + t.hosts[0] + "/" + path
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// redisParamsError is the usage error of parameters go-redis refused.
func redisParamsError(err error) error {
	return UsageError("the Redis URL's parameters do not parse: %s (outbox help stores lists them)", RedactText(rootMessage(err)))
}

// parseSingle sets up the client of a redis:// URL (one server).
func (t *StoreTarget) parseSingle(path string, q url.Values, userinfo *url.Userinfo) (**tls.Config, error) {
	if len(t.hosts) > 1 {
		return nil, UsageError("a redis:// URL names one server, this one names %d: for a Redis Cluster write redis+cluster://%s, for Sentinel redis+sentinel://%s/MASTER",
			len(t.hosts), strings.Join(t.hosts, ","), strings.Join(t.hosts, ","))
	}
	o, err := redis.ParseURL(t.redisURL(path, q))
	if err != nil {
		return nil, redisParamsError(err)
	}
	t.single = o
	o.Username, o.Password = userPassword(userinfo)
	return &o.TLSConfig, nil
}

// parseSentinel sets up the client of a redis+sentinel:// URL.
func (t *StoreTarget) parseSentinel(path string, q url.Values, userinfo *url.Userinfo) (**tls.Config, error) {
	master, db, _ := strings.Cut(path, "/")
	if master == "" {
		return nil, UsageError("a redis+sentinel:// URL needs the master name as its path: redis+sentinel://SENTINEL:26379/MASTER[/DB]")
	}
	if db != "" {
		q.Set("db", db)
	}
	sentUser, sentPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	q.Set("master_name", master)
	for _, h := range t.hosts[1:] {
		q.Add("addr", h)
	}
	o, err := redis.ParseFailoverURL(t.redisURL("", q))
	if err != nil {
		return nil, redisParamsError(err)
	}
	o.SentinelUsername, o.SentinelPassword = sentUser, sentPass
	if userinfo != nil {
		o.Username, o.Password = userPassword(userinfo)
	}
	t.failover = o
	return &o.TLSConfig, nil
}

// parseCluster sets up the client of a redis+cluster:// URL.
func (t *StoreTarget) parseCluster(path string, q url.Values, userinfo *url.Userinfo) (**tls.Config, error) {
	if path != "" && path != "0" {
		return nil, UsageError("a Redis Cluster has database 0 only: drop /%s from the redis+cluster:// URL", path)
	}
	for _, h := range t.hosts[1:] {
		q.Add("addr", h)
	}
	o, err := redis.ParseClusterURL(t.redisURL("", q))
	if err != nil {
		return nil, redisParamsError(err)
	}
	o.Username, o.Password = userPassword(userinfo)
	t.cluster = o
	return &o.TLSConfig, nil
}

// applyTLS applies the tls_* parameters to a Redis client's TLS config.
func (t *StoreTarget) applyTLS(cfg **tls.Config, opts map[string]string) error {
	if !t.tls {
		for k := range opts {
			return UsageError("%s= sets up TLS, but the URL is plain text: write rediss://, rediss+sentinel:// or rediss+cluster://", k)
		}
		return nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.mode == "" {
		c.ServerName = strings.Trim(t.hosts[0][:strings.LastIndexByte(t.hosts[0], ':')], "[]")
	} // else: each connection verifies the host it dials (tls.DialWithDialer)
	if v, ok := opts["tls_server_name"]; ok {
		c.ServerName = v
	}
	if v, ok := opts["skip_verify"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return UsageError("skip_verify=%q: write skip_verify=true or skip_verify=false", v)
		}
		c.InsecureSkipVerify = b
	}
	if f, ok := opts["tls_ca"]; ok {
		pem, err := os.ReadFile(f)
		if err != nil {
			return UsageError("tls_ca: %v: give the path of a PEM file of CA certificates", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return UsageError("tls_ca: %s holds no PEM certificate: give a PEM file of CA certificates", f)
		}
		c.RootCAs = pool
	}
	certFile, hasCert := opts["tls_cert"]
	keyFile, hasKey := opts["tls_key"]
	if hasCert != hasKey {
		return UsageError("tls_cert and tls_key go together: give both (the client certificate and its key) or neither")
	}
	if hasCert {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return UsageError("tls_cert/tls_key: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	*cfg = c
	return nil
}

func userPassword(u *url.Userinfo) (string, string) {
	if u == nil {
		return "", ""
	}
	p, _ := u.Password()
	return u.Username(), p
}

// Identity names an outbox by where it is, without user info or
// parameters: two names are equal when they name the same outbox (as far
// as the URLs tell).
func Identity(t *StoreTarget, f StoreFlags) string {
	hosts := slices.Clone(t.hosts)
	slices.Sort(hosts)
	h := strings.Join(hosts, ",")
	switch {
	case t.Kind == "postgres":
		name := pgx.Identifier{OrDefault(f.Schema, pgoutbox.DefaultSchema), OrDefault(f.Table, pgoutbox.DefaultTable)}.Sanitize()
		return fmt.Sprintf("postgres://%s/%s %s", h, t.pg.ConnConfig.Database, name)
	case t.Kind == "mysql":
		return fmt.Sprintf("mysql://%s/%s %s", h, t.my.DBName, MySQLQuote(OrDefault(f.Table, mysqloutbox.DefaultTable)))
	case t.mode == "sentinel":
		return fmt.Sprintf("redis+sentinel://%s/%s/%d prefix %q", h, t.failover.MasterName, t.failover.DB, OrDefault(f.Prefix, redisoutbox.DefaultPrefix))
	case t.mode == "cluster":
		return fmt.Sprintf("redis+cluster://%s prefix %q", h, OrDefault(f.Prefix, redisoutbox.DefaultPrefix))
	default:
		return fmt.Sprintf("redis://%s/%d prefix %q", h, t.single.DB, OrDefault(f.Prefix, redisoutbox.DefaultPrefix))
	}
}

// checkTLS makes one TLS connection to the first host before the client
// does, with a short handshake deadline. go-redis retries a failed dial
// until the context ends, so without it a rediss:// URL pointing at a
// plain-text server (which waits for the rest of a "command" that is in
// fact a TLS ClientHello) or at a server with an untrusted certificate
// would only report a timeout. A handshake that times out is followed by
// a plain-text PING: a RESP answer means the server does not speak TLS.
func (t *StoreTarget) checkTLS(ctx context.Context) error {
	if t.Kind != "redis" || !t.tls {
		return nil
	}
	cfg := t.redisTLS()
	if cfg == nil {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, tlsCheckTimeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg.Clone()}
	conn, err := d.DialContext(hctx, "tcp", t.hosts[0])
	if err == nil {
		return conn.Close()
	}
	var recErr tls.RecordHeaderError
	if !errors.As(err, &recErr) && speaksPlainRESP(ctx, t.hosts[0]) {
		err = tls.RecordHeaderError{Msg: "the server answered a plain-text PING"}
	}
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return &RedactedError{Msg: fmt.Sprintf("the TLS handshake with %s did not finish within %v: check that the port is the server's TLS port", t.hosts[0], tlsCheckTimeout), Err: err}
	}
	return t.Explain(err)
}

// tlsCheckTimeout bounds checkTLS's handshake.
const tlsCheckTimeout = 3 * time.Second

// speaksPlainRESP reports whether host answers a plain-text PING with a
// RESP reply (+PONG, or an error such as -NOAUTH).
func speaksPlainRESP(ctx context.Context, host string) bool {
	pctx, cancel := context.WithTimeout(ctx, tlsCheckTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(pctx, "tcp", host)
	if err != nil {
		return false
	}
	defer conn.Close()
	deadline, _ := pctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return false
	}
	return buf[0] == '+' || buf[0] == '-'
}

func (t *StoreTarget) redisTLS() *tls.Config {
	switch {
	case t.single != nil:
		return t.single.TLSConfig
	case t.failover != nil:
		return t.failover.TLSConfig
	case t.cluster != nil:
		return t.cluster.TLSConfig
	}
	return nil
}

// newRedis makes the Redis client the URL describes.
func (t *StoreTarget) newRedis() redis.UniversalClient {
	switch t.mode {
	case "sentinel":
		return redis.NewFailoverClient(t.failover)
	case "cluster":
		return redis.NewClusterClient(t.cluster)
	}
	return redis.NewClient(t.single)
}

// checkNotCluster refuses a Redis Cluster node named by a redis:// URL:
// commands on keys of the other nodes' slots would fail with MOVED. A
// server that does not allow INFO is given the benefit of the doubt (a
// MOVED error is explained when it comes).
func (t *StoreTarget) checkNotCluster(ctx context.Context, c redis.UniversalClient) error {
	if t.mode != "" {
		return nil
	}
	info, err := c.Info(ctx, "cluster").Result()
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		return fmt.Errorf("the Redis server at %s is a Redis Cluster node: name the cluster with %s://%s (one or more nodes, comma-separated), not %s",
			t.hosts[0], t.clusterScheme(), t.hosts[0], t.Where)
	}
	return nil
}

func (t *StoreTarget) clusterScheme() string {
	if t.tls {
		return "rediss+cluster"
	}
	return "redis+cluster"
}
