// Package mysqloutbox is the MySQL and MariaDB backend of the outbox: the
// appends run in the caller's *sql.Tx, the relay claims partitions with
// fenced leases, and every contract of [outbox.Backend] holds (see
// docs/mysql.md).
package mysqloutbox
