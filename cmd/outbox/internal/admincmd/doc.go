// Package admincmd is the outbox command's administration family: migrate
// (up, down, status, sql), status, parked, show, requeue, cancel and
// purge. The commands use only the SPI and its optional interfaces
// (Inspector, PartitionInspector, Looker, Canceler, Holder, Sealer), so
// they work on every backend that implements them; purge and the
// migrations are Postgres's own. The -o json shapes (StatusJSON,
// ParkedJSON, ShowJSON, MigrateStatusJSON) are documented by 'outbox help
// json'.
package admincmd
