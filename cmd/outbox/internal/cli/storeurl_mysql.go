package cli

// MySQL and MariaDB store URLs: mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS],
// turned into a go-sql-driver/mysql Config field by field (the password
// never goes through a DSN string).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// mysqlDefaultPort is the port of a mysql:// URL that names none.
const mysqlDefaultPort = "3306"

// mysqlTLSParams are the URL parameters that set up TLS, as for
// PostgreSQL.
var mysqlTLSParams = []string{"sslmode", "sslrootcert", "sslcert", "sslkey"}

// mysqlRefused are go-sql-driver parameters a store URL may not set,
// with the reason.
var mysqlRefused = map[string]string{
	"tls":                     "set TLS with sslmode=disable|preferred|require|verify-ca|verify-full (and sslrootcert, sslcert, sslkey) instead",
	"multiStatements":         "the outbox runs one statement per call, and multiple statements widen what an injected string could do",
	"allowAllFiles":           "the outbox never loads local files, and allowing every file lets a server read the client's",
	"allowCleartextPasswords": "it sends the password in clear text; use sslmode=require (or verify-full) with a TLS-capable authentication plugin",
	"allowOldPasswords":       "the old password hashing is insecure; upgrade the account's authentication plugin",
	"interpolateParams":       "the outbox sends parameters separately from the query text",
	"parseTime":               "the outbox exchanges times as integers, so it changes nothing",
	"loc":                     "the outbox exchanges times as integers, so it changes nothing",
	"clientFoundRows":         "the outbox's writes count changed rows",
	"columnsWithAlias":        "the outbox's queries read columns by position",
	"user":                    "put the user before the host: mysql://USER:PASSWORD@HOST/DB",
	"password":                "put the password before the host: mysql://USER:PASSWORD@HOST/DB (percent-encoded)",
}

// parseMySQL parses a mysql:// (or mariadb://) URL into t.my.
func (t *StoreTarget) parseMySQL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return UsageError("the MySQL URL does not parse: %s: write mysql://USER:PASSWORD@HOST:3306/DATABASE, with special characters of the password percent-encoded (outbox help stores)",
			RedactText(rootMessage(err), URLSecrets(raw)...))
	}
	if u.Opaque != "" || u.Host == "" {
		return UsageError("the MySQL URL names no host: write mysql://USER:PASSWORD@HOST:3306/DATABASE")
	}
	if strings.Contains(u.Host, ",") {
		return UsageError("a mysql:// URL names one server, this one names several (%s): give the primary's host", u.Host)
	}
	if u.User == nil || u.User.Username() == "" {
		return UsageError("the MySQL URL names no user: write mysql://USER:PASSWORD@%s/DATABASE (MySQL has no default user)", u.Host)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return UsageError("the MySQL URL names no host: write mysql://USER:PASSWORD@HOST:3306/DATABASE")
	}
	if port == "" {
		port = mysqlDefaultPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return UsageError("the MySQL URL has a bad port %q: write HOST:PORT with PORT from 1 to 65535 (3306 by default)", port)
	}
	cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(host, port)
	db := strings.TrimPrefix(u.Path, "/")
	switch {
	case db == "":
		return UsageError("the MySQL URL names no database: write mysql://USER:PASSWORD@%s/DATABASE (the outbox's tables live in that database)", cfg.Addr)
	case strings.Contains(db, "/"):
		return UsageError("the MySQL URL's path %q names more than a database: write mysql://USER:PASSWORD@%s/DATABASE (name the outbox's table with --table)", u.Path, cfg.Addr)
	}
	cfg.DBName = db
	t.Kind, t.user, t.hosts, t.my = "mysql", cfg.User, []string{cfg.Addr}, cfg
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return UsageError("the MySQL URL's parameters do not parse: %s", RedactText(rootMessage(err), URLSecrets(raw)...))
	}
	tlsOpts := map[string]string{}
	for _, k := range mysqlTLSParams {
		if q.Has(k) {
			tlsOpts[k] = q.Get(k)
			q.Del(k)
		}
	}
	if err := applyMySQLParams(cfg, q); err != nil {
		return err
	}
	return t.applyMySQLTLS(host, tlsOpts)
}

// applyMySQLParams sets the go-sql-driver parameters of q on cfg. The
// driver's own parameters that are safe pass through; unknown names are
// session system variables (SET name = value on each connection), as the
// driver treats them.
func applyMySQLParams(cfg *mysql.Config, q url.Values) error {
	for k, vs := range q {
		v := vs[len(vs)-1]
		if why, ok := mysqlRefused[k]; ok {
			return UsageError("the MySQL URL parameter %s= is not accepted: %s", k, why)
		}
		var err error
		switch k {
		case "timeout":
			cfg.Timeout, err = mysqlDuration(k, v)
		case "readTimeout":
			cfg.ReadTimeout, err = mysqlDuration(k, v)
		case "writeTimeout":
			cfg.WriteTimeout, err = mysqlDuration(k, v)
		case "charset":
			err = cfg.Apply(mysql.Charset(v, cfg.Collation))
		case "collation":
			cfg.Collation = v
		case "maxAllowedPacket":
			cfg.MaxAllowedPacket, err = strconv.Atoi(v)
			if err != nil || cfg.MaxAllowedPacket < 0 {
				err = UsageError("maxAllowedPacket=%q: give a size in bytes (0 reads the server's max_allowed_packet)", v)
			}
		case "connectionAttributes":
			cfg.ConnectionAttributes = v
		case "serverPubKey":
			cfg.ServerPubKey = v
		case "compress", "rejectReadOnly", "allowNativePasswords", "allowFallbackToPlaintext", "checkConnLiveness":
			err = setMySQLBool(cfg, k, v)
		default:
			if strings.ContainsAny(k, "` ;=") || k == "" {
				return UsageError("the MySQL URL parameter %q is neither a driver parameter nor a system variable name", k)
			}
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[k] = v
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func mysqlDuration(k, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, UsageError("%s=%q: give a duration such as 5s or 500ms", k, v)
	}
	return d, nil
}

func setMySQLBool(cfg *mysql.Config, k, v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return UsageError("%s=%q: write %s=true or %s=false", k, v, k, k)
	}
	switch k {
	case "compress":
		return cfg.Apply(mysql.EnableCompression(b))
	case "rejectReadOnly":
		cfg.RejectReadOnly = b
	case "allowNativePasswords":
		cfg.AllowNativePasswords = b
	case "allowFallbackToPlaintext":
		cfg.AllowFallbackToPlaintext = b
	case "checkConnLiveness":
		cfg.CheckConnLiveness = b
	}
	return nil
}

// applyMySQLTLS sets up TLS from the sslmode, sslrootcert, sslcert and
// sslkey parameters, with PostgreSQL's meanings: disable (plain text),
// preferred (TLS when the server offers it, unverified; the default),
// require (TLS, unverified), verify-ca (TLS, the certificate chain
// verified against sslrootcert or the system's CAs), verify-full
// (verify-ca and the host name).
func (t *StoreTarget) applyMySQLTLS(host string, opts map[string]string) error {
	cfg := t.my
	mode, hasMode := opts["sslmode"]
	if !hasMode {
		mode = "preferred"
	}
	if mode == "prefer" {
		mode = "preferred"
	}
	switch mode {
	case "disable":
		for _, k := range mysqlTLSParams[1:] {
			if _, ok := opts[k]; ok {
				return UsageError("%s= sets up TLS, but sslmode=disable turns it off: drop one of them", k)
			}
		}
		return nil
	case "preferred", "require", "verify-ca", "verify-full":
	default:
		return UsageError("sslmode=%q: write sslmode=disable, preferred, require, verify-ca or verify-full", mode)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f, ok := opts["sslrootcert"]; ok {
		pool, err := loadCAs("sslrootcert", f)
		if err != nil {
			return err
		}
		c.RootCAs = pool
	}
	certFile, hasCert := opts["sslcert"]
	keyFile, hasKey := opts["sslkey"]
	if hasCert != hasKey {
		return UsageError("sslcert and sslkey go together: give both (the client certificate and its key) or neither")
	}
	if hasCert {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return UsageError("sslcert/sslkey: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	switch mode {
	case "preferred", "require":
		c.InsecureSkipVerify = true
		cfg.AllowFallbackToPlaintext = mode == "preferred"
	case "verify-ca":
		c.InsecureSkipVerify = true // the chain is verified below, the name is not
		c.VerifyPeerCertificate = verifyChain(c.RootCAs)
	case "verify-full":
		c.ServerName = host
	}
	t.tls = mode != "preferred"
	cfg.TLS = c
	return nil
}

// loadCAs reads a PEM file of CA certificates for the parameter param.
func loadCAs(param, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, UsageError("%s: %v: give the path of a PEM file of CA certificates", param, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, UsageError("%s: %s holds no PEM certificate: give a PEM file of CA certificates", param, file)
	}
	return pool, nil
}

// verifyChain verifies the server's certificate chain against roots (nil:
// the system's), without checking the host name (sslmode=verify-ca).
func verifyChain(roots *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("the server sent no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, der := range raw {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return fmt.Errorf("the server's certificate does not parse: %w", err)
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
		if err != nil {
			return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: err}
		}
		return nil
	}
}

// MySQLQuote quotes a MySQL identifier in backquotes.
func MySQLQuote(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// The MySQL pool's idle connections: database/sql keeps 2 by default, so
// a relay whose partition workers query at once would open and close a
// connection (a TCP and authentication handshake) for most queries.
const (
	mysqlMaxIdleConns    = 64
	mysqlConnMaxIdleTime = 10 * time.Minute
)

// connectMySQL opens the MySQL pool of t and pings it. The pool keeps up
// to mysqlMaxIdleConns idle connections, each for at most
// mysqlConnMaxIdleTime.
func (o *Opened) connectMySQL(ctx context.Context, t *StoreTarget) error {
	connector, err := mysql.NewConnector(t.my.Clone())
	if err != nil {
		return UsageError("the MySQL URL's parameters are refused: %s", RedactText(rootMessage(err)))
	}
	db := sql.OpenDB(connector)
	db.SetMaxIdleConns(mysqlMaxIdleConns)
	db.SetConnMaxIdleTime(mysqlConnMaxIdleTime)
	o.SQL = db
	o.closers = append(o.closers, func() { _ = db.Close() })
	if err := db.PingContext(ctx); err != nil {
		o.Close()
		return t.Explain(err)
	}
	return nil
}

// isMySQLError reports whether err is a MySQL server error with the number.
func isMySQLError(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}

// describeMySQL explains the MySQL errors a store URL can cause, or "".
func (t *StoreTarget) describeMySQL(err error) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045: // ER_ACCESS_DENIED_ERROR
			return fmt.Sprintf("MySQL at %s rejected user %q or its password (1045 access denied): correct the user and password in the store URL (--store, OUTBOX_STORE or store: in the --config file), and check that the account may connect from this host (user@host in mysql.user)", t.hosts[0], t.user)
		case 1044: // ER_DBACCESS_DENIED_ERROR
			return fmt.Sprintf("MySQL at %s does not let user %q use database %q (1044 access denied; the server says so also when no such database exists): fix the database name, the path of the store URL, or GRANT SELECT, INSERT, UPDATE, DELETE (and CREATE, DROP, ALTER, INDEX for outbox migrate) ON `%s`.* TO the user", t.hosts[0], t.user, t.my.DBName, t.my.DBName)
		case 1049: // ER_BAD_DB_ERROR
			return fmt.Sprintf("MySQL at %s has no database %q (1049 unknown database): fix the database name, the path of the store URL, or create it (CREATE DATABASE `%s`)", t.hosts[0], t.my.DBName, t.my.DBName)
		case 1142, 1143: // ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR
			return fmt.Sprintf("user %q may not do this (%d: %s): GRANT SELECT, INSERT, UPDATE, DELETE ON `%s`.* (and CREATE, DROP, ALTER, INDEX for outbox migrate) to it", t.user, me.Number, me.Message, t.my.DBName)
		case 1146: // ER_NO_SUCH_TABLE
			return fmt.Sprintf("a table of the outbox is missing in database %q at %s (1146: %s): run \"outbox migrate up --store URL --partitions N\" (with --table if the outbox has another name), or check --table", t.my.DBName, t.hosts[0], me.Message)
		case 1290, 1836: // ER_OPTION_PREVENTS_STATEMENT (read_only), ER_READ_ONLY_MODE
			return fmt.Sprintf("MySQL at %s is read-only (%d: %s): point the store URL at the primary", t.hosts[0], me.Number, me.Message)
		}
		return ""
	}
	switch {
	case errors.Is(err, mysql.ErrNoTLS):
		return fmt.Sprintf("MySQL at %s does not accept TLS connections, but sslmode requires TLS: set sslmode=preferred or sslmode=disable, or enable TLS on the server (ssl_cert, ssl_key)", t.hosts[0])
	case errors.Is(err, mysql.ErrCleartextPassword):
		return fmt.Sprintf("MySQL at %s asks for the password in clear text (its authentication plugin does), which the outbox refuses: use an account with caching_sha2_password or mysql_native_password", t.hosts[0])
	case errors.Is(err, mysql.ErrOldPassword), errors.Is(err, mysql.ErrNativePassword):
		return fmt.Sprintf("MySQL at %s asks for an authentication method this connection refuses (%s): change the account's authentication plugin, or allow it (allowNativePasswords=true)", t.hosts[0], err)
	case errors.Is(err, mysql.ErrInvalidConn), errors.Is(err, mysql.ErrMalformPkt):
		return fmt.Sprintf("the server at %s broke off the MySQL protocol (%s): check that the port is MySQL's (3306 by default), and sslmode", t.hosts[0], rootMessage(err))
	}
	return ""
}
