package outbox

import (
	"context"
	"errors"
)

// Relay moves entries from a [Store] to a [Sink]: at least once, in
// per-key order, with retries, backoff, parking and scheduled delivery.
//
// A relay leases partitions (one worker per leased partition), fetches
// bounded batches of due entries, publishes them with a bound on messages
// in flight, and records each outcome. Failed entries are retried after a
// jittered, capped exponential delay; permanent failures and entries out
// of attempts are parked. Several relays may run against one outbox: each
// partition is relayed by one lease holder at a time.
type Relay struct {
	store Store
	sink  Sink
	opts  RelayOptions
}

// RelayStats are cumulative counters of one [Relay].
type RelayStats struct {
	// Published counts entries the sink acknowledged and that were marked
	// sent.
	Published int64
	// Retried counts failed attempts that were re-scheduled.
	Retried int64
	// Parked counts entries parked (permanent failure or out of attempts).
	Parked int64
	// Batches counts fetched, non-empty batches.
	Batches int64
	// LeaseLosses counts leases lost while held.
	LeaseLosses int64
	// PartitionsHeld is the number of partitions leased right now.
	PartitionsHeld int64
}

// NewRelay returns a relay from store to sink. It checks opts and reports
// every bad setting at once.
func NewRelay(store Store, sink Sink, opts RelayOptions) (*Relay, error) {
	if store == nil || sink == nil {
		return nil, errors.New("outbox: NewRelay needs a non-nil store and sink")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Relay{store: store, sink: sink, opts: o}, nil
}

// Start starts relaying in the background and returns at once. ctx bounds
// the relay's whole life: when it is done, the relay stops as if Stop were
// called. Start may be called once.
func (r *Relay) Start(ctx context.Context) error { return errors.New("outbox: relay not implemented yet") }

// Stop stops fetching, waits for the batches in flight to finish
// (publish and mark) and releases the leases. If ctx ends first, in-flight
// publishing is cancelled, Stop returns ctx's error and the leases expire
// on their own. Stop is idempotent.
func (r *Relay) Stop(ctx context.Context) error { return nil }

// Run starts the relay and blocks until ctx is done, then stops it,
// waiting for in-flight batches at most LeaseTTL. It returns nil after a
// clean stop.
func (r *Relay) Run(ctx context.Context) error { return errors.New("outbox: relay not implemented yet") }

// Notify wakes the relay's idle partition workers now, as a backend
// notification would: call it after committing a transaction that
// appended entries to cut the commit-to-publish latency. It never blocks.
func (r *Relay) Notify() {}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats { return RelayStats{} }

// Owner returns the relay's lease owner token.
func (r *Relay) Owner() string { return r.opts.Owner }
