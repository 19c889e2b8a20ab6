// Package admincmd is the outbox command's administration family: migrate
// (up, down, status, sql), status, entries, blocked, parked, show,
// requeue, cancel, pause, resume, relays and purge. The commands use only
// the SPI and its optional interfaces (Inspector, PartitionInspector,
// Looker, Canceler, Lister, Pauser, MemberLister, Holder, Sealer), so they
// work on every backend that implements them, and name the interface a
// backend lacks; purge and the migrations are Postgres's own. The
// operator logic they share with the dashboard (filters, paging, pause
// targets, the fleet) is in internal/ops. The -o json shapes (StatusJSON,
// EntriesJSON, BlockedJSON, ParkedJSON, ShowJSON, RelaysJSON,
// MigrateStatusJSON) are documented by 'outbox help json'.
package admincmd
