package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/exactlyonce"
	"github.com/outboxrelay/outbox/chaos/internal/inboxconsumer"
	"github.com/outboxrelay/outbox/chaos/internal/proc"
	"github.com/outboxrelay/outbox/chaos/internal/servers"
	"github.com/outboxrelay/outbox/internal/mysqlurl"
)

// The inbox/ scenarios go one step past the broker: consumer processes
// (`chaos inbox-consumer`) read the topic in a consumer group and write
// one effect per entry in a PostgreSQL schema, a MySQL database or a
// Redis prefix of their own, and the check is on those effects (package
// exactlyonce): every committed entry applied exactly once, each key in
// append order.

// inboxSpec makes a scenario an inbox/ one.
type inboxSpec struct {
	// mode is the consumers' -mode: inboxconsumer.ModeInbox, or
	// ModePlain for the negative control.
	mode string
	// consumers is how many consumer processes run.
	consumers int
	// db is where the consumers keep their effects and inbox: a schema
	// of the run's own in the shared PostgreSQL (""), a database of its
	// own in the shared MySQL ("mysql"), or a hash-tagged prefix of its
	// own in the shared Redis ("redis").
	db string
}

// where names the consumers' database in the report.
func (s *inboxSpec) where() string { return cmp.Or(s.db, "postgres") }

// control: the scenario is the negative control, which must show
// duplicates.
func (s *inboxSpec) control() bool { return s.mode == inboxconsumer.ModePlain }

func inboxScenarios() []*scenario {
	my := inboxChaos("inbox/mysql", inboxconsumer.ModeInbox,
		"outbox (MySQL) -> 3 relays -> kfake -> 3 consumers with the inbox (MySQL): a consumer SIGKILLed, a relay SIGKILLed mid-publish, a consumer SIGSTOPped past its session, broker produce faults, in turn every 2-3 s",
		"The inbox/postgres run with the outbox in a MySQL database of the run's own (mysqloutbox, KeySequence on) and the consumers' effect table and inbox (mysqlinbox) in another, on the shared MySQL/MariaDB server; the effect rows are ordered by an AUTO_INCREMENT column. The harness kills MariaDB sessions only on private servers, so the consumers' sessions are not killed here: that turn kills a consumer instead.")
	my.backend, my.inbox.db = backendMySQL, "mysql"
	rd := inboxChaos("inbox/redis", inboxconsumer.ModeInbox,
		"outbox (Redis) -> 3 relays -> kfake -> 3 consumers with the inbox (Redis): a consumer SIGKILLed, a relay SIGKILLed mid-publish, a consumer SIGSTOPped past its session, broker produce faults, in turn every 2-3 s",
		"The inbox/postgres run with the outbox under a prefix of the run's own on the shared Redis (KeySequence on) and the consumers' inbox (redisinbox: MULTI/EXEC guarded by WATCH) under another; the effect is an RPUSH onto a list queued in the inbox's MULTI, so the list's order is the order of the EXECs. The consumers' connections are not killed on the shared server: that turn kills a consumer instead.")
	rd.backend, rd.inbox.db = backendRedis, "redis"
	return []*scenario{
		inboxChaos("inbox/postgres", inboxconsumer.ModeInbox,
			"outbox -> 3 relays -> kfake -> 3 consumers with the inbox (PostgreSQL): a consumer SIGKILLed, a relay SIGKILLed mid-publish, a consumer SIGSTOPped past its session, consumer sessions terminated, broker produce faults, in turn every 2-3 s",
			"Appenders number each key's entries (the outbox's KeySequence: header outbox-key-seq). Three consumer processes share the topic's partitions in a consumer group (static membership: a restarted consumer takes its predecessor's partitions at once) and apply each record through the inbox (kafkainbox's Consumer over a pginbox Store): the effect row, the entry's ID, the key's sequence number and the partition's next offset commit in one transaction, and a consumer resumes from the offsets stored with the effects, never from Kafka's. Faults in turn: a consumer SIGKILLed mid-stream and started again; a relay SIGKILLed while the broker holds produce requests for 600ms (what it had in flight is written after its death and never marked sent, so the relay that takes its partitions over publishes it again: duplicates on the topic); a consumer SIGSTOPped for 8 s, past its 6 s session timeout, so that the group gives its partitions to the others while it holds a batch, maybe in an open transaction, which it finishes when continued (a zombie) before it joins again; every consumer PostgreSQL session terminated (a transaction dies mid-statement or during COMMIT, its outcome unknown to the consumer, which runs it again); the broker failing the next produce requests or dropping their connections. At the end, after the outbox is drained and the consumers have caught up, the effect table must hold every committed entry exactly once, and each key's effects in append order (by the effect rows' bigserial)."),
		inboxChaos("inbox/control-no-inbox", inboxconsumer.ModePlain,
			"negative control: the same run with consumers WITHOUT the inbox (a transaction per record, offsets committed to Kafka after it)",
			"The same pipeline and the same faults, but the consumers apply each record in a transaction holding only the effect and commit its offset to Kafka afterwards (marked after the commit, committed every 5 s): the usual at-least-once consumer. A killed consumer's successor starts from the last committed offset and applies again what was applied since, and every duplicate record on the topic (a killed relay's re-publishes) is applied twice. The exactly-once check must find duplicates, or it could not see one."),
		my, rd,
	}
}

func inboxChaos(name, mode, title, notes string) *scenario {
	return &scenario{
		name: name, backend: backendPostgres, relays: 3,
		inbox: &inboxSpec{mode: mode, consumers: 3},
		title: title, notes: notes,
		every: 2 * time.Second, jitter: time.Second,
		full: 120 * time.Second, short: 14 * time.Second,
		inject: injectInboxFault, heal: healInbox,
	}
}

// inboxRun is an inbox/ scenario's part of a run: its consumers and what
// their effects came to.
type inboxRun struct {
	schema string // the consumers' schema in the shared PostgreSQL
	store  string // the consumers' database: the shared PostgreSQL, or their MySQL database
	group  string

	mu        sync.Mutex
	consumers []*consumerProc // by slot
	kills     int
	contAt    time.Time // when the last SIGSTOPped consumer is continued

	effects *exactlyonce.Report
}

type consumerProc struct {
	slot, gen int
	p         *proc.Proc
	ending    bool      // the harness killed or terminated it
	stopped   time.Time // until when it is SIGSTOPped
}

// pickConsumer picks a consumer slot at random among those not
// SIGSTOPped at the moment (the others stay the zombies they are meant
// to be). Call it with ir.mu held.
func (r *run) pickConsumer() *consumerProc {
	ir := r.inbox
	var free []*consumerProc
	for _, c := range ir.consumers {
		if c != nil && time.Now().After(c.stopped) {
			free = append(free, c)
		}
	}
	if len(free) == 0 {
		return ir.consumers[r.rng.IntN(len(ir.consumers))]
	}
	return free[r.rng.IntN(len(free))]
}

// consumerHold is how long a SIGSTOPped consumer stays stopped: past
// its session timeout (6 s), so that the group gives its partitions to
// the others while it still holds a batch (and maybe a transaction).
const consumerHold = 8 * time.Second

// injectInboxFault injects fault i; in turn: a consumer SIGKILLed, a
// relay SIGKILLed mid-publish, a consumer SIGSTOPped past its session,
// the consumers' sessions terminated, a broker produce fault.
func injectInboxFault(ctx context.Context, r *run, i int) error {
	if err := r.inbox.checkAlive(); err != nil {
		return err
	}
	switch i % 5 {
	case 0:
		return r.killConsumer()
	case 1:
		return killRelayMidPublish(ctx, r)
	case 2:
		return r.stopConsumer()
	case 3:
		if r.sc.inbox.db != "" {
			return r.killConsumer()
		}
		n, err := servers.TerminateBackends(ctx, r.h.pgURL, r.consumerAppName())
		if err != nil {
			return err
		}
		r.fault("consumer sessions terminated", "pg_terminate_backend on %d sessions of %s*", n, r.consumerAppName())
		return nil
	default:
		if i%10 == 4 {
			r.fault("produce errors", "the next 20 produce requests fail with NOT_ENOUGH_REPLICAS")
			return r.broker.FailProduce(ctx, 20, "NOT_ENOUGH_REPLICAS")
		}
		r.fault("connections dropped", "the next 5 produce requests drop their connection")
		return r.broker.DropConnections(ctx, 5)
	}
}

// killRelayMidPublish holds the next produce requests at the broker a
// moment and SIGKILLs a relay meanwhile: what it had in flight is often
// written after its death and never marked sent, so the relay taking its
// partitions over publishes it again (duplicates on the topic, which the
// consumers must not apply twice).
func killRelayMidPublish(ctx context.Context, r *run) error {
	if err := r.broker.DelayProduce(ctx, 3, 600*time.Millisecond); err != nil {
		return err
	}
	if err := sleep(ctx, 200*time.Millisecond); err != nil {
		return err
	}
	return killRelay(r)
}

// stopConsumer SIGSTOPs a consumer for consumerHold and then continues
// it: the group hands its partitions to the others in the meantime, and
// when it wakes it finishes the batch it held (a zombie) before it learns
// it left the group and joins again.
func (r *run) stopConsumer() error {
	ir := r.inbox
	ir.mu.Lock()
	c := r.pickConsumer()
	slot := c.slot
	ir.contAt = time.Now().Add(consumerHold)
	c.stopped = ir.contAt
	ir.mu.Unlock()
	r.fault("consumer SIGSTOPped", "cons-%d generation %d for %v (past its 6s session timeout), then SIGCONT", slot, c.gen, consumerHold)
	if err := c.p.Stop(); err != nil {
		return err
	}
	time.AfterFunc(consumerHold, func() {
		if err := c.p.Cont(); err == nil {
			r.logf("SIGCONT cons-%d generation %d", slot, c.gen)
		}
	})
	return nil
}

// healInbox waits until a stopped consumer was continued.
func healInbox(ctx context.Context, r *run) error {
	r.inbox.mu.Lock()
	d := time.Until(r.inbox.contAt)
	r.inbox.mu.Unlock()
	return sleep(ctx, d+100*time.Millisecond)
}

// consumerAppName is the application_name prefix of the consumers'
// PostgreSQL sessions.
func (r *run) consumerAppName() string { return r.appName() + "cons-" }

// setupInbox creates the consumers' schema and starts them.
func (r *run) setupInbox(ctx context.Context) error {
	name := "chaos_" + strings.ReplaceAll(r.id, "-", "_") + "_in"
	r.inbox = &inboxRun{schema: name, store: r.h.pgURL, group: "chaos-" + r.id}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch r.sc.inbox.db {
	case "mysql":
		if err := r.setupConsumerMySQL(sctx, name); err != nil {
			return err
		}
	case "redis":
		if err := r.setupConsumerRedis(); err != nil {
			return err
		}
	default:
		r.cleanup = append(r.cleanup, func() { dropSchema(r.h.pgURL, name) })
	}
	if err := inboxconsumer.Setup(sctx, r.inbox.store, r.inbox.schema); err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, r.stopConsumers)
	for slot := range r.sc.inbox.consumers {
		if err := r.startConsumer(slot); err != nil {
			return err
		}
	}
	return nil
}

// setupConsumerMySQL makes the consumers' database on the shared MySQL,
// dropped at the end, and points the inbox run's store at it.
func (r *run) setupConsumerMySQL(ctx context.Context, database string) error {
	admin, err := mysqlurl.DSN(r.h.mysqlURL)
	if err != nil {
		return fmt.Errorf("OUTBOX_MYSQL_URL: %w", err)
	}
	if err := mysqlExec(ctx, admin, "CREATE DATABASE `"+database+"`"); err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = mysqlExec(ctx, admin, "DROP DATABASE IF EXISTS `"+database+"`")
	})
	r.inbox.store, err = mysqlurl.WithDatabase(r.h.mysqlURL, database, "")
	return err
}

// setupConsumerRedis points the inbox run's store at a prefix of its own
// on the shared Redis, whose keys are deleted at the end.
func (r *run) setupConsumerRedis() error {
	tag := "chaos-" + r.id + "-in"
	u, err := url.Parse(r.h.redisURL)
	if err != nil {
		return errors.New("OUTBOX_REDIS_URL is not a URL")
	}
	q := u.Query()
	q.Set("prefix", "{"+tag+"}")
	u.RawQuery = q.Encode()
	r.inbox.store = u.String()
	r.cleanup = append(r.cleanup, func() { dropRedisKeys(r.h.redisURL, tag) })
	return nil
}

// consumerStore is the -store of consumer slot: the shared PostgreSQL
// with an application_name of the run's (what the session kills
// match), or the consumers' MySQL database.
func (r *run) consumerStore(slot int) (string, error) {
	if r.sc.inbox.db != "" {
		return r.inbox.store, nil
	}
	u, err := url.Parse(r.h.pgURL)
	if err != nil {
		return "", fmt.Errorf("OUTBOX_POSTGRES_URL: %w", err)
	}
	q := u.Query()
	q.Set("application_name", r.consumerAppName()+fmt.Sprint(slot))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// startConsumer starts a consumer in slot (a new generation of it, with
// the slot's static instance ID).
func (r *run) startConsumer(slot int) error {
	ir := r.inbox
	ir.mu.Lock()
	gen := 0
	for len(ir.consumers) <= slot {
		ir.consumers = append(ir.consumers, nil)
	}
	if c := ir.consumers[slot]; c != nil {
		gen = c.gen + 1
	}
	ir.mu.Unlock()
	name := fmt.Sprintf("cons-%d", slot)
	store, err := r.consumerStore(slot)
	if err != nil {
		return err
	}
	args := []string{"inbox-consumer",
		"-kafka-brokers", r.broker.Brokers(),
		"-topic", topic,
		"-group", ir.group,
		"-instance", name,
		"-store", store,
		"-schema", ir.schema,
		"-mode", r.sc.inbox.mode,
	}
	logName := fmt.Sprintf("%s.%d.log", name, gen)
	p, err := proc.Start(name, filepath.Join(r.dir, logName), r.h.self, args, nil)
	if err != nil {
		return err
	}
	ir.mu.Lock()
	ir.consumers[slot] = &consumerProc{slot: slot, gen: gen, p: p}
	ir.mu.Unlock()
	r.logf("started %s generation %d (PID %d)", name, gen, p.PID())
	return nil
}

// killConsumer SIGKILLs a consumer and starts it again at once.
func (r *run) killConsumer() error {
	ir := r.inbox
	ir.mu.Lock()
	c := r.pickConsumer()
	slot := c.slot
	c.ending = true
	ir.kills++
	ir.mu.Unlock()
	r.fault("consumer SIGKILLed", "cons-%d generation %d (PID %d), started again at once", slot, c.gen, c.p.PID())
	if err := c.p.Kill(); err != nil {
		return err
	}
	return r.startConsumer(slot)
}

// checkAlive fails the run when a consumer exited on its own.
func (ir *inboxRun) checkAlive() error {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	for _, c := range ir.consumers {
		if c == nil || c.ending {
			continue
		}
		if done, err := c.p.Exited(); done {
			return fmt.Errorf("cons-%d exited on its own (%v); see %s", c.slot, err, c.p.Log)
		}
	}
	return nil
}

func (r *run) stopConsumers() {
	ir := r.inbox
	ir.mu.Lock()
	cs := append([]*consumerProc(nil), ir.consumers...)
	for _, c := range cs {
		if c != nil {
			c.ending = true
		}
	}
	ir.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		if c == nil {
			continue
		}
		wg.Go(func() {
			if err := c.p.Terminate(15 * time.Second); err != nil && !errors.Is(err, proc.ErrExited) {
				r.logf("cons-%d: %v", c.slot, err)
			}
		})
	}
	wg.Wait()
}

// checkEffects waits for the consumers to apply every committed entry
// (and then for the effect table to stay still a moment), stops them and
// checks the effect rows against the appenders' histories.
func (r *run) checkEffects(ctx context.Context) error {
	files := make([]string, r.h.cfg.appenders)
	for i := range files {
		files[i] = r.appHistory(i)
	}
	h, err := history.ReadFiles(files...)
	if err != nil {
		return err
	}
	committed, unknown := h.Entries()
	if err := r.quiesceConsumers(ctx, len(committed)); err != nil {
		return err
	}
	if err := r.inbox.checkAlive(); err != nil {
		return err
	}
	r.stopConsumers()
	r.observeConsumers()
	effects, err := inboxconsumer.ReadEffects(ctx, r.inbox.store, r.inbox.schema)
	if err != nil {
		return err
	}
	entries := make([]exactlyonce.Entry, 0, len(committed)+len(unknown))
	for _, e := range committed {
		entries = append(entries, exactlyonce.Entry{ID: e.ID, Key: e.Key, Seq: e.Seq})
	}
	for _, e := range unknown {
		entries = append(entries, exactlyonce.Entry{ID: e.ID, Key: e.Key, Seq: e.Seq, Unknown: true})
	}
	rep := exactlyonce.Check(entries, effects)
	r.inbox.mu.Lock()
	r.inbox.effects = &rep
	r.inbox.mu.Unlock()
	r.logf("effects: %v", rep)
	return nil
}

// observeConsumers keeps, for the report, the summary line each consumer
// process that was stopped gracefully printed at exit (SIGKILLed ones
// print none).
func (r *run) observeConsumers() {
	files, _ := filepath.Glob(filepath.Join(r.dir, "cons-*.log"))
	var lines []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.Index(line, "inbox-consumer cons-"); i >= 0 && strings.Contains(line, ": summary after ") {
				lines = append(lines, strings.TrimSuffix(strings.SplitN(line[i:], "\"", 2)[0], "\""))
			}
		}
	}
	if len(lines) > 0 {
		r.observe("The consumers still running at the end, at their exit (counts since their start):\n\n```\n%s\n```", strings.Join(lines, "\n"))
	}
}

// quiesceConsumers waits, for at most a minute, until the effect table
// holds at least want distinct entries and its row count has not changed
// for two seconds. It returns nil when the minute is up (what is missing
// is then reported by the check).
func (r *run) quiesceConsumers(ctx context.Context, want int) error {
	const still = 2 * time.Second
	deadline := time.Now().Add(time.Minute)
	last, lastChange := -1, time.Now()
	for time.Now().Before(deadline) {
		applied, rows, err := inboxconsumer.CountEffects(ctx, r.inbox.store, r.inbox.schema)
		if err != nil {
			r.logf("counting effects: %v", err)
		} else {
			if rows != last {
				last, lastChange = rows, time.Now()
			}
			if applied >= want && time.Since(lastChange) >= still {
				r.logf("consumers caught up: %d entries applied, %d effect rows", applied, rows)
				return nil
			}
		}
		if err := r.inbox.checkAlive(); err != nil {
			return err
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	r.logf("consumers did not catch up within a minute (want %d entries applied)", want)
	return nil
}

// effectsTable is the inbox/ scenarios' table: the exactly-once check's
// counts.
func effectsTable(rs []*result) string {
	var b strings.Builder
	for _, r := range rs {
		if r.sc.inbox == nil || r.effects == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n| scenario (effects) | consumers | entries (unknown, applied) | effects | missing | duplicates (entries) | order violations | unexpected | consumer kills | verdict |\n" +
				"|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		}
		e := r.effects
		fmt.Fprintf(&b, "| %s | %d, %s, %s | %d (%d, %d) | %d | %d | %d (%d) | %d | %d | %d | %s |\n",
			r.sc.name, r.sc.inbox.consumers, r.sc.inbox.mode, r.sc.inbox.where(), e.Entries, e.Unknown, e.UnknownApplied, e.Effects,
			len(e.Missing), e.Duplicates, e.DuplicateIDs, len(e.OrderViolations), len(e.Unexpected), r.consumerKills, r.verdict())
	}
	return b.String()
}

// effectsSection is what the report says of an inbox/ scenario's effects
// ("" for the others).
func effectsSection(r *result) string {
	if r.effects == nil {
		return ""
	}
	return fmt.Sprintf("\nThe consumers' effects (%d consumer SIGKILLs):\n\n```\n%v\n```\n", r.consumerKills, r.effects)
}

// inboxPassed is passed() for an inbox/ scenario: the broker's history
// check must pass (the relays are the ordinary ones), and the effects
// must be exactly once, or, for the negative control, must show
// duplicates.
func (r *result) inboxPassed() bool {
	if r.effects == nil || !r.report.OK() {
		return false
	}
	if r.sc.inbox.control() {
		return r.effects.Duplicates > 0
	}
	// The appenders number the keys (-key-sequence): every effect must
	// have seen its record's number, or the order check ran blind.
	return r.effects.OK() && r.effects.Unnumbered == 0
}

// finishInbox is the end of an inbox/ run: the effects' check after the
// broker's.
func (r *run) finishInbox(ctx context.Context, rep *history.Report, err error) (*history.Report, error) {
	if err != nil || r.inbox == nil {
		return rep, err
	}
	return rep, r.checkEffects(ctx)
}
