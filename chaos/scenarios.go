package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxrelay/outbox/chaos/internal/servers"
)

type backendKind string

const (
	backendPostgres        backendKind = "postgres" // the shared server, own schema
	backendRedis           backendKind = "redis"    // the shared server, own prefix
	backendPrivatePostgres backendKind = "postgres (private)"
	backendPrivateRedis    backendKind = "redis (private, AOF always)"
	backendPrivateCluster  backendKind = "redis cluster (private, 3+3)"
	backendMySQL           backendKind = "mysql"             // the shared server, own database
	backendPrivateMariaDB  backendKind = "mariadb (private)" // mariadbd of the run's own
)

// scenario is one kind of fault, injected again and again on one backend.
type scenario struct {
	name    string
	title   string // what is injected, one line
	backend backendKind
	// broker is what the relays publish to (default: kfake, the Kafka
	// sink).
	broker brokerKind
	// leaseTTL overrides the config's relay --lease-ttl (0: keep it), for
	// a sink whose landing bound needs a longer lease.
	leaseTTL time.Duration
	// relays started at first (default 2); maxRelays bounds the slots a
	// scenario may fill later.
	relays, maxRelays int
	// every is the time between faults (plus up to jitter); full is the
	// fault phase of the full run, short that of -short.
	every, jitter time.Duration
	full, short   time.Duration
	// inject applies fault i and records it with r.fault.
	inject func(ctx context.Context, r *run, i int) error
	// heal undoes whatever is still applied at the end (optional).
	heal func(ctx context.Context, r *run) error
	// watch runs beside the fault phase until the run ends (optional).
	watch func(ctx context.Context, r *run)
	// outside says why the scenario is outside the guarantees, and so
	// what it found is reported but does not fail the run; "" means
	// inside: a loss, an order violation or an unexpected delivery fails.
	outside string
	// noDuplicates says why the broker drops every re-publish (the NATS
	// stream's duplicate window): a duplicate then fails the run as a
	// loss does. "" means duplicates are only counted.
	noDuplicates string
	// notes are what the report says about the scenario.
	notes string
	// control names the broken relay of a negative control (`chaos
	// control-relay -mode control`): the checker must fail the run.
	control string
	// inbox makes it an inbox/ scenario: consumer processes apply the
	// records and their effects are checked (scenarios_inbox.go).
	inbox *inboxSpec
}

func (sc *scenario) slug() string {
	// It names schemas, prefixes, directories and application names:
	// letters, digits and '-' only.
	s := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, sc.name)
	if len(s) > 24 {
		s = s[:24]
	}
	return s
}

// lease is the relays' --lease-ttl in this scenario.
func (sc *scenario) lease(c config) time.Duration {
	if sc.leaseTTL > 0 {
		return sc.leaseTTL
	}
	return c.leaseTTL
}

func (sc *scenario) phase(c config) time.Duration {
	d := sc.full
	if c.short {
		d = sc.short
	}
	return time.Duration(float64(d) * c.scale)
}

func scenarios() []*scenario {
	return append([]*scenario{
		relayKill("relay-kill/postgres", backendPostgres),
		relayKill("relay-kill/redis", backendRedis),
		relayStop("relay-stop/postgres", backendPostgres),
		relayStop("relay-stop/redis", backendRedis),
		pgTerminate(),
		pgRestart(),
		redisKill(),
		brokerFaults(),
		clusterFailover(),
		fleetChurn(),
		relayKill("mysql/relay-kill", backendMySQL),
		mysqlConnKill(),
		mysqlServerRestart(),
		sinkRestart("nats/relay-kill+broker-restart", brokerNATS),
		sinkRestart("amqp/relay-kill+broker-restart", brokerAMQP),
		negativeControl("control/unordered", "unordered",
			"negative control: a relay that publishes each batch in a shuffled order (no fault injected)",
			"The relay hands the entries of a batch to the Kafka sink shuffled, keys included: the checker must report order violations, or it could not see one."),
		negativeControl("control/lossy-sink", "lossy",
			"negative control: a sink that drops 0.1% of records and reports them published (no fault injected)",
			"The relay's sink skips one record in a thousand and reports it published, so the outbox marks it sent: the checker must report those entries lost."),
	}, inboxScenarios()...)
}

func negativeControl(name, mode, title, notes string) *scenario {
	return &scenario{
		name: name, backend: backendPostgres, relays: 1, control: mode,
		title: title, notes: notes,
		every: 5 * time.Second, full: 20 * time.Second, short: 8 * time.Second,
		inject: func(context.Context, *run, int) error { return nil },
	}
}

// relayKill: a relay is SIGKILLed and started again at once, every few
// seconds. Its partitions stall until their leases expire.
func relayKill(name string, b backendKind) *scenario {
	return &scenario{
		name: name, backend: b, relays: 3,
		title: "a relay SIGKILLed and restarted every 4-6 s",
		every: 4 * time.Second, jitter: 2 * time.Second,
		full: 150 * time.Second, short: 12 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error { return killRelay(r) },
		notes:  "Three relays share the partitions. A killed relay's batches in flight may have been published and not marked sent: they are published again by the relay that takes the partition over, once the lease expires (duplicates, at most a batch per partition it held). Its partitions deliver nothing until then, so recovery is about the lease TTL.",
	}
}

// relayStop: a relay is SIGSTOPped for longer than the lease and then
// continued: it wakes holding a batch of partitions another relay owns.
func relayStop(name string, b backendKind) *scenario {
	return &scenario{
		name: name, backend: b, relays: 3,
		title: "a relay SIGSTOPped for lease+3 s, then SIGCONT",
		every: 6 * time.Second, jitter: time.Second,
		full: 170 * time.Second, short: 14 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			// Stop relays in turn; each is continued lease+3s later, so at
			// most two of the three are stopped at once.
			slot := i % 3
			rp := r.relay(slot)
			if rp == nil {
				return errNoRelay
			}
			hold := r.h.cfg.leaseTTL + 3*time.Second
			// Hold the next produce requests at the broker a moment first,
			// so the relay is often stopped in the middle of a publish: it
			// wakes with a batch to finish under leases it lost.
			if err := r.broker.DelayProduce(ctx, 3, 600*time.Millisecond); err != nil {
				return err
			}
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
			r.fault("relay SIGSTOPped", "relay-%d (%s) for %v, produce requests held 600ms at the broker", slot, rp.owner, hold)
			if err := rp.p.Stop(); err != nil {
				return err
			}
			time.AfterFunc(hold, func() {
				if err := rp.p.Cont(); err == nil {
					r.logf("SIGCONT relay-%d (%s)", slot, rp.owner)
				}
			})
			return nil
		},
		heal: func(ctx context.Context, r *run) error {
			// Wait for every stopped relay to be continued.
			return sleep(ctx, r.h.cfg.leaseTTL+3*time.Second)
		},
		notes: "A stopped relay keeps its leases in its memory while they expire in the store; another relay takes the partitions over and publishes their entries. When the stopped relay continues, it still holds a fetched batch: every write it makes for it is fenced by the lease version, so it can neither mark the new holder's entries nor release them, and the relay stops publishing under a lease a third of its TTL plus the sink's landing bound before the lease ends. What it published before it was stopped may be published again by the new holder (duplicates).",
	}
}

// pgTerminate: pg_terminate_backend on every session of this run's relays
// and appenders (by application_name).
func pgTerminate() *scenario {
	return &scenario{
		name: "pg-terminate/postgres", backend: backendPostgres, relays: 2,
		title: "pg_terminate_backend on every relay and appender session, every 2-3 s",
		every: 2 * time.Second, jitter: time.Second,
		full: 100 * time.Second, short: 10 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			n, err := servers.TerminateBackends(ctx, r.h.pgURL, r.appName())
			if err != nil {
				return err
			}
			r.fault("pg_terminate_backend", "%d sessions of %s*", n, r.appName())
			return nil
		},
		notes: "Relays lose their connections mid-statement (a fetch, a mark, a lease renewal, the LISTEN session); appenders lose theirs mid-transaction and sometimes during COMMIT, when the outcome is unknown to them: they record the entry as unknown and retry it with the same ID, which the backend skips if the first commit went through.",
	}
}

// pgRestart: the private PostgreSQL is stopped with -m immediate (a crash:
// no checkpoint, WAL replayed at start) and started again.
func pgRestart() *scenario {
	return &scenario{
		name: "pg-restart/postgres", backend: backendPrivatePostgres, relays: 2,
		title: "the PostgreSQL server crashed (pg_ctl stop -m immediate) and started again, every 6-8 s",
		every: 6 * time.Second, jitter: 2 * time.Second,
		full: 240 * time.Second, short: 14 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			r.fault("PostgreSQL crashed", "pg_ctl stop -m immediate, started 1s later")
			if err := r.pg.StopImmediate(ctx); err != nil {
				return err
			}
			if err := sleep(ctx, time.Second); err != nil {
				return err
			}
			start := time.Now()
			if err := r.pg.Start(ctx); err != nil {
				return err
			}
			r.logf("PostgreSQL accepting connections %v after start", time.Since(start).Round(time.Millisecond))
			return nil
		},
		notes: "A private cluster (initdb, its own port and data directory, fsync on). Every session dies; the server is down about a second and replays its WAL at start. Commits that returned are durable; a COMMIT in flight when the server died has an unknown outcome for the appender. Leases survive in the table, so partitions come back to their holders as soon as the relays reconnect.",
	}
}

// redisKill: the private Redis (appendonly yes, appendfsync always) is
// SIGKILLed and started again.
func redisKill() *scenario {
	return &scenario{
		name: "redis-kill/redis", backend: backendPrivateRedis, relays: 2,
		title: "redis-server (appendfsync always) SIGKILLed and restarted, every 5-7 s",
		every: 5 * time.Second, jitter: 2 * time.Second,
		full: 180 * time.Second, short: 12 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			r.fault("redis-server SIGKILLed", "restarted 0.5s later")
			if err := r.rds.Kill(); err != nil {
				return err
			}
			if err := sleep(ctx, 500*time.Millisecond); err != nil {
				return err
			}
			return r.rds.Restart(ctx)
		},
		notes: "A private redis-server with appendonly yes and appendfsync always: every write is fsynced to the AOF before the reply, so whatever a client saw acknowledged survives the kill. An EXEC whose reply was lost has an unknown outcome for the appender.",
	}
}

// brokerFaults: the broker fails, delays or drops produce requests.
func brokerFaults() *scenario {
	return &scenario{
		name: "broker-faults/postgres", backend: backendPostgres, relays: 2,
		title: "broker: produce errors, produce requests delayed past the lease, connections dropped (in turn, every 4-6 s)",
		every: 4 * time.Second, jitter: 2 * time.Second,
		full: 150 * time.Second, short: 14 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			switch i % 3 {
			case 0:
				r.fault("produce errors", "the next 20 produce requests fail with NOT_ENOUGH_REPLICAS")
				return r.broker.FailProduce(ctx, 20, "NOT_ENOUGH_REPLICAS")
			case 1:
				d := r.h.cfg.leaseTTL + 2*time.Second
				r.fault("produce delayed", "the next 3 produce requests held %v (past the lease)", d)
				return r.broker.DelayProduce(ctx, 3, d)
			default:
				r.fault("connections dropped", "the next 5 produce requests drop their connection")
				return r.broker.DropConnections(ctx, 5)
			}
		},
		heal:  func(ctx context.Context, r *run) error { return r.broker.Reset(ctx) },
		notes: "Produce errors are retried by the client and by the relay (with backoff); a request held past the publish timeout fails the round, and its records may still be written later, within the sink's landing bound (a duplicate when the retry lands too); a dropped connection fails the request in flight.",
	}
}

// clusterFailover: a master of a private Redis Cluster fails over to its
// replica (forced, or killed).
func clusterFailover() *scenario {
	return &scenario{
		name: "cluster-failover/redis", backend: backendPrivateCluster, relays: 2,
		title: "Redis Cluster (3 masters, 3 replicas): a master failed over (CLUSTER FAILOVER, CLUSTER FAILOVER FORCE or SIGKILL, in turn), every 6-8 s",
		every: 6 * time.Second, jitter: 2 * time.Second,
		full: 260 * time.Second, short: 14 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			masters, err := r.cluster.Masters(ctx)
			if err != nil {
				return err
			}
			if len(masters) == 0 {
				return fmt.Errorf("no master")
			}
			m := masters[r.rng.IntN(len(masters))]
			switch i % 3 {
			case 0:
				r.fault("CLUSTER FAILOVER", "coordinated, on the replica of %s", m)
				_, err := r.cluster.Failover(ctx, m)
				return err
			case 1:
				r.fault("CLUSTER FAILOVER FORCE", "on the replica of %s", m)
				_, err := r.cluster.FailoverForce(ctx, m)
				return err
			}
			r.fault("master SIGKILLed", "%s, restarted after its replica took over", m)
			if err := r.cluster.KillNode(m); err != nil {
				return err
			}
			if err := r.cluster.WaitHealthy(ctx); err != nil {
				return err
			}
			return r.cluster.RestartNode(ctx, m)
		},
		heal:    func(ctx context.Context, r *run) error { return r.cluster.WaitHealthy(ctx) },
		outside: "Redis replication is asynchronous: a master that fails over may not have passed its last acknowledged writes to the replica that replaces it (an append, a mark sent, a lease), and Redis does not promise them. The outbox cannot keep what the store forgot.",
		notes:   "Three kinds of failover in turn. CLUSTER FAILOVER (no option) is the coordinated one of planned maintenance: the master stops accepting writes until its replica has caught up, then the replica takes over, so nothing acknowledged is lost. CLUSTER FAILOVER FORCE promotes a replica without the master's agreement: writes the old master acknowledged before it learned of the promotion are discarded when it rejoins as a replica. A killed master's replica is promoted after the node timeout (1 s here); writes it had not replicated are lost. Lost appends show as lost entries (attributed below to the fault before their commit), lost marks as duplicates, lost lease renewals as two relays holding one partition for a while (order at risk).",
	}
}

// fleetChurn: relays join (started) and leave (SIGTERM), between one and
// four of them.
func fleetChurn() *scenario {
	return &scenario{
		name: "fleet-churn/postgres", backend: backendPostgres, relays: 2, maxRelays: 4,
		title: "relays joining (started) and leaving (SIGTERM), 1 to 4 of them, every 4-6 s",
		every: 4 * time.Second, jitter: 2 * time.Second,
		full: 150 * time.Second, short: 14 * time.Second,
		inject: func(ctx context.Context, r *run, i int) error {
			live := r.liveRelays()
			join := len(live) <= 1 || (len(live) < 4 && r.rng.IntN(2) == 0)
			if join {
				slot := freeSlot(r, 4)
				r.fault("relay joins", "relay-%d (%d running)", slot, len(live))
				return r.startRelay(slot)
			}
			slot := live[r.rng.IntN(len(live))]
			rp := r.relay(slot)
			r.fault("relay leaves", "relay-%d (%s) SIGTERMed (%d running)", slot, rp.owner, len(live))
			go func() {
				if err := rp.terminate(15 * time.Second); err != nil {
					r.logf("relay-%d: %v", slot, err)
				}
			}()
			return nil
		},
		watch: watchHolders,
		notes: "A relay that leaves drains its batches and releases its leases, so another relay takes its partitions at once; a relay that joins gets its share as the others release partitions above their fair share. The timeline below shows the partitions each relay held.",
	}
}

func freeSlot(r *run, n int) int {
	for s := range n {
		rp := r.relay(s)
		if rp == nil {
			return s
		}
		if done, _ := rp.p.Exited(); done {
			return s
		}
	}
	return 0
}

// watchHolders samples the lease holders once a second and records each
// change of who holds how many partitions.
func watchHolders(ctx context.Context, r *run) {
	start := time.Now()
	last := ""
	for ctx.Err() == nil {
		if s, err := r.status(ctx); err == nil {
			counts := map[string]int{}
			free := 0
			for _, p := range s.ByPartition {
				if p.Lease == nil || p.Lease.Expires.Before(time.Now()) {
					free++
					continue
				}
				counts[p.Lease.Owner]++
			}
			line := holdersLine(counts, free)
			if line != last {
				r.event("%6.1fs  %s", time.Since(start).Seconds(), line)
				last = line
			}
		}
		_ = sleep(ctx, time.Second)
	}
}

func holdersLine(counts map[string]int, free int) string {
	var owners []string
	for o := range counts {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	var b strings.Builder
	for _, o := range owners {
		fmt.Fprintf(&b, "%s:%d ", o, counts[o])
	}
	fmt.Fprintf(&b, "unheld:%d", free)
	return b.String()
}
