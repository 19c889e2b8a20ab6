// Package natssink is the NATS JetStream [outbox.Sink], built on nats.go's
// jetstream package.
package natssink
