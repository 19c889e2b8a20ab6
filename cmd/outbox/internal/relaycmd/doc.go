// Package relaycmd is outbox relay: the relay process. It relays one
// outbox to Kafka through the Kafka sink until SIGTERM or SIGINT, then
// drains; serves /metrics (Prometheus), /healthz and /readyz, and the
// dashboard with --ui-addr; and logs when the outbox is held by a move.
package relaycmd
