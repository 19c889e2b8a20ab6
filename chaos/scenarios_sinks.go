package main

import (
	"context"
	"fmt"
	"time"
)

// sinkRestart: on the NATS or the RabbitMQ sink, relays SIGKILLed and the
// private broker server SIGKILLed and started again, in turn.
func sinkRestart(name string, b brokerKind) *scenario {
	server, notes, dedupe, lease := "nats-server", natsRestartNotes, natsNoDuplicates, time.Duration(0)
	if b == brokerAMQP {
		// The RabbitMQ sink's landing bound with its defaults is 9s
		// (CloseTimeout 2s, two heartbeats of 3s, 1s), and the relay
		// wants a lease above 1.5 times it.
		server, notes, dedupe, lease = "RabbitMQ node", amqpRestartNotes, "", 15*time.Second
	}
	return &scenario{
		noDuplicates: dedupe, leaseTTL: lease,
		name: name, backend: backendPostgres, broker: b, relays: 3,
		title: fmt.Sprintf("a relay SIGKILLed and restarted, and the %s SIGKILLed and started again on its port and data, in turn, every 4-6 s", server),
		every: 4 * time.Second, jitter: 2 * time.Second,
		full: 150 * time.Second, short: 14 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			// The server first: a short run (CI) gets two of its kills.
			if i%2 == 0 {
				return restartServer(ctx, r, server)
			}
			return killRelay(r)
		},
		notes: notes,
	}
}

// killRelay SIGKILLs a running relay and starts it again at once.
func killRelay(r *run) error {
	live := r.liveRelays()
	if len(live) == 0 {
		return errNoRelay
	}
	slot := live[r.rng.IntN(len(live))]
	rp := r.relay(slot)
	r.fault("relay SIGKILLed", "relay-%d (%s, PID %d)", slot, rp.owner, rp.p.PID())
	if err := rp.kill(); err != nil {
		return err
	}
	return r.startRelay(slot)
}

// restartServer SIGKILLs the run's broker server and starts it again half
// a second later.
func restartServer(ctx context.Context, r *run, what string) error {
	r.fault(what+" SIGKILLed", "started again 0.5s later on its port and data directory")
	r.server.Kill()
	if err := sleep(ctx, 500*time.Millisecond); err != nil {
		return err
	}
	start := time.Now()
	if err := r.server.Restart(ctx); err != nil {
		return err
	}
	r.logf("%s serving %v after its start", what, time.Since(start).Round(time.Millisecond))
	return nil
}

const natsRestartNotes = "Three relays share the partitions and publish through the NATS sink to a private `nats-server -js` with file storage, on a stream with a duplicate window of 10 minutes (longer than the run). A killed relay's batches in flight may have been published and not marked sent: the relay that takes the partition over publishes them again once the lease expires, with the same Nats-Msg-Id, and the stream drops them. A killed server loses its connections and every publish awaiting an acknowledgement, which the sink fails as transient: the relay retries them after the server is back, and the stream drops those it had stored (it rebuilds its duplicate window from the stored messages at start). So the stream holds every committed entry, each key in order, and no duplicate: a duplicate here is one the duplicate window failed to drop, and the run reports it. Recovery after a server kill is the server's start (well under a second) plus the relay's circuit-breaker cooldown (5 s): the relays' publishes failed in consecutive rounds while it was down."

const natsNoDuplicates = "Every re-publish of an entry carries its Nats-Msg-Id and falls inside the stream's duplicate window (10 minutes, longer than the run), so the stream must drop it."

const amqpRestartNotes = "Three relays share the partitions and publish through the RabbitMQ sink (publisher confirms, mandatory, persistent messages; its default timeouts, so a landing bound of 9 s and `--lease-ttl 15s`) to a private RabbitMQ node, on a durable fanout exchange with a durable classic queue, which is read at the end in queue order. A killed relay's batches in flight may have been confirmed and not marked sent: the relay that takes the partition over publishes them again once the lease expires (duplicates, at most a batch per partition it held). A killed node loses its connections and every publish awaiting a confirm, which the sink fails as transient: the relay retries them once the node is back, and those the node had already written are duplicates. A confirmed message is on disk, so nothing confirmed is lost across the kill. RabbitMQ drops no duplicate itself: consumers deduplicate by message_id. Arrival times (for recovery) come from a second queue on the exchange that the harness consumes during the run. Recovery after a node kill is the node's start (5-8 s on this machine), the sink's reconnection (its backoff doubles up to 5 s while the node is down) and the relay's circuit-breaker cooldown (5 s), so it can exceed the lease-plus-a-second target, which is about the relays: the broker itself was down."
