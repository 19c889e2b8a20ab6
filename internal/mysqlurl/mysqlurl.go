// Package mysqlurl turns the mysql:// store URLs of the outbox CLI into
// go-sql-driver/mysql DSNs, for the connections of the tests
// (internal/testenv) and of the chaos harness (its appenders and admin
// sessions). It imports only the standard library. The CLI parses its
// store URLs itself, with TLS and the driver's parameters checked.
package mysqlurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// DSN turns mysql://USER[:PASSWORD]@HOST[:PORT]/[DATABASE][?PARAMS] into
// the DSN USER[:PASSWORD]@tcp(HOST:PORT)/DATABASE[?PARAMS]: the port
// defaults to 3306, the host to 127.0.0.1, and the query parameters are
// passed on as they are (they are the driver's: timeout, tls, ...). Its
// errors never repeat the password.
func DSN(raw string) (string, error) {
	u, err := parse(raw)
	if err != nil {
		return "", err
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	var b strings.Builder
	if u.User != nil {
		b.WriteString(u.User.Username())
		if p, ok := u.User.Password(); ok {
			b.WriteString(":" + p)
		}
		b.WriteString("@")
	}
	b.WriteString("tcp(" + net.JoinHostPort(host, port) + ")/")
	b.WriteString(strings.TrimPrefix(u.Path, "/"))
	if u.RawQuery != "" {
		b.WriteString("?" + u.RawQuery)
	}
	return b.String(), nil
}

// WithDatabase returns raw with its path set to /database, and with the
// user set to user when user is not empty (no password then).
func WithDatabase(raw, database, user string) (string, error) {
	u, err := parse(raw)
	if err != nil {
		return "", err
	}
	u.Path, u.RawPath = "/"+database, ""
	if user != "" {
		u.User = url.User(user)
	}
	return u.String(), nil
}

func parse(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return nil, fmt.Errorf("mysqlurl: not a URL (%v); write mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE", err)
	}
	if u.Scheme != "mysql" {
		return nil, fmt.Errorf("mysqlurl: %s: scheme %q; write mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE", u.Redacted(), u.Scheme)
	}
	if strings.Contains(strings.TrimPrefix(u.Path, "/"), "/") {
		return nil, fmt.Errorf("mysqlurl: %s: the path names one database; write mysql://USER@HOST:PORT/DATABASE", u.Redacted())
	}
	return u, nil
}
