// Package demo is outbox demo: a self-checking run that needs nothing
// but Go. It appends entries in transactions (some roll back) to an
// outbox, relays them through the Kafka sink to an in-process Kafka (or,
// with --sink nats, through the NATS sink to an embedded NATS server with
// JetStream; with --sink amqp, through the RabbitMQ sink to a RabbitMQ
// that runs already) while broker failures are injected, hands one
// relay's partitions over to another halfway, consumes the topic back and
// checks every count against the plan.
//
// The files follow the run: demo.go the command and its flags, plan.go
// what a seed makes the run do, run.go the run itself, world.go what
// happened and the report, faults.go the injected failures and the
// relays' log, broker.go (broker_nats.go, broker_amqp.go) the broker of
// --sink and its consumer, dashboard.go --ui, demo_backends.go the outbox
// it runs on.
package demo
