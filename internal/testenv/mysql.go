package testenv

import "github.com/outboxrelay/outbox/internal/mysqlurl"

// mysqlDSN turns a mysql://USER[:PASSWORD]@HOST[:PORT]/[DATABASE][?PARAMS]
// URL into a go-sql-driver/mysql DSN, with database in place of the URL's
// when it is not empty. A URL that does not parse gives a DSN naming
// 127.0.0.1:1, which the caller then fails to reach (and reports with
// [Unavailable]) without repeating the password.
func mysqlDSN(raw, database string) string {
	var err error
	if database != "" {
		raw, err = mysqlurl.WithDatabase(raw, database, "")
	}
	dsn := ""
	if err == nil {
		dsn, err = mysqlurl.DSN(raw)
	}
	if err != nil {
		return "root@tcp(127.0.0.1:1)/" + database
	}
	return dsn
}
