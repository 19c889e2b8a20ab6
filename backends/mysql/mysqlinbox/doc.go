// Package mysqlinbox is the MySQL and MariaDB store of an inbox
// (package inbox): it records applied message IDs, the keys' sequence
// numbers and the source partitions' offsets in the consumer's own
// *sql.Tx, next to the handler's effects.
package mysqlinbox
