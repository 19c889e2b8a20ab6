package testenv

import (
	"net"
	neturl "net/url"
	"strings"
)

// mysqlDSN turns a mysql://USER[:PASSWORD]@HOST[:PORT]/[DATABASE][?PARAMS]
// URL into a go-sql-driver/mysql DSN, with database in place of the URL's
// when it is not empty. A URL that does not parse gives a DSN naming
// 127.0.0.1:1, which the caller then fails to reach (and reports with
// [Unavailable]) without repeating the password.
func mysqlDSN(raw, database string) string {
	u, err := neturl.Parse(raw)
	if err != nil || u.Scheme != "mysql" {
		return "root@tcp(127.0.0.1:1)/" + database
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
	if database == "" {
		database = strings.TrimPrefix(u.Path, "/")
	}
	b.WriteString(database)
	if u.RawQuery != "" {
		b.WriteString("?" + u.RawQuery)
	}
	return b.String()
}
