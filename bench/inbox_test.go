package main

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// memInboxTarget is the in-memory inbox store with an in-memory effect
// table that a transaction's rows reach when it commits: the harness's
// consumers and checks, without a database.
func memInboxTarget() inboxTarget[*inbox.MemoryTx] {
	return inboxTarget[*inbox.MemoryTx]{name: "memory", key: "mem", title: "Memory", store: "inbox.Memory", plain: "MemoryTx",
		open: func(context.Context) (*inboxSide[*inbox.MemoryTx], error) {
			m := inbox.NewMemory()
			var (
				mu   sync.Mutex
				rows []effectRow
			)
			effect := func(_ context.Context, tx *inbox.MemoryTx, rec *kgo.Record) error {
				seq, keySeq, err := parsePayload(rec.Value)
				if err != nil {
					return err
				}
				tx.OnCommit(func() {
					mu.Lock()
					rows = append(rows, effectRow{seq: seq, key: string(rec.Key), keySeq: keySeq})
					mu.Unlock()
				})
				return nil
			}
			return &inboxSide[*inbox.MemoryTx]{
				store:  m,
				effect: effect,
				plain:  txPlain(m.InTx, effect),
				counts: func(_ context.Context, n int) (Counts, error) {
					mu.Lock()
					defer mu.Unlock()
					return effectCounts(rows, n), nil
				},
				close: func() {},
			}, nil
		}}
}

// Both consumers, per record and in batches, apply every record of the
// topic once, in key order; the inbox consumer then skips the records
// handed to it again.
func TestInboxRunsApplyEveryRecordOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 1000
	recs := inboxRecords(n, 1)
	cluster, err := inboxCluster(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	// The group row's run, with its offsets check: a consumer group of
	// 3 over the memory store.
	if c, _, _, err := inboxGroupRun(ctx, memInboxTarget(), cluster, n, 3, nextOffsets(recs)); err != nil || c.Delivered != n {
		t.Errorf("a group of 3: %+v, %v", c, err)
	}
	// The offsets check can fail.
	wrong := nextOffsets(recs)
	wrong[0]++
	if _, _, _, err := inboxGroupRun(ctx, memInboxTarget(), cluster, n, 1, wrong); err == nil || !strings.Contains(err.Error(), "offsets") {
		t.Errorf("a group of 1 with a wrong expected offset: %v, want an error about the offsets", err)
	}
	for _, batch := range []int{1, inboxBatch} {
		for _, kind := range []consumerKind{plainConsumer, inboxConsumer, idConsumer, splitConsumer} {
			c, el, err := inboxRun(ctx, memInboxTarget(), cluster, n, batch, kind, newPhases())
			if err != nil {
				t.Fatalf("batch %d, consumer %d: %v", batch, kind, err)
			}
			if c.Delivered != n || c.Duplicates != 0 || el <= 0 {
				t.Errorf("batch %d, consumer %d: %+v in %s", batch, kind, c, el)
			}
		}
	}
}

// The check can fail: the plain consumer handed the records twice leaves
// duplicates, which the counts report; the inbox consumer told to expect
// Applied for records it applied before fails.
func TestInboxChecksCatchDuplicates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 300
	cluster, err := inboxCluster(ctx, inboxRecords(n, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	target := memInboxTarget()
	side, err := target.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := consumeN(ctx, cluster, n, 10, plainHandler(side, newPhases())); err != nil {
			t.Fatal(err)
		}
	}
	c, err := side.counts(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.check(false); err == nil || c.Duplicates != n {
		t.Errorf("the plain consumer run twice: %+v, check %v; want %d duplicates reported", c, err, n)
	}

	side, err = target.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(side.store, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := consumeN(ctx, cluster, n, 10, inboxHandler(side, ib, false, inbox.Applied)); err != nil {
		t.Fatal(err)
	}
	_, err = consumeN(ctx, cluster, 10, 10, inboxHandler(side, ib, false, inbox.Applied))
	if err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("redelivered records expected to be applied: %v, want an error naming the duplicate", err)
	}
	if c, _ := side.counts(ctx, n); c.Delivered != n || c.Duplicates != 0 {
		t.Errorf("after the redelivery: %+v, want every record once", c)
	}
}

// -only and -skip pick the inbox rows by "inbox <store> <part>".
func TestInboxWorkloadSelection(t *testing.T) {
	t.Parallel()
	all := []string{"postgres 1/tx", "postgres 100/tx", "postgres group", "mysql 1/tx", "mysql 100/tx", "redis 1/tx", "redis 100/tx"}
	for _, c := range []struct {
		only, skip string
		want       []string
	}{
		{"", "", all},
		{"inbox", "", all},
		{"inbox postgres", "", all[:3]},
		{"inbox .* 1/tx", "", []string{"postgres 1/tx", "mysql 1/tx", "redis 1/tx"}},
		{"inbox", "inbox (mysql|redis)|group", all[:2]},
		{"outbox/postgres|river|W5", "", nil},
		{"", "inbox", nil},
	} {
		s := &Suite{}
		if c.only != "" {
			s.cfg.Only = regexp.MustCompile(c.only)
		}
		if c.skip != "" {
			s.cfg.Skip = regexp.MustCompile(c.skip)
		}
		var got []string
		for _, st := range inboxStores {
			for _, sub := range inboxSubs(st.name) {
				if s.inboxSubSelected(sub) {
					got = append(got, sub)
				}
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("-only %q -skip %q: run %q, want %q", c.only, c.skip, got, c.want)
		}
		if s.selectedWorkload(workload{name: "inbox"}) != (len(got) > 0) {
			t.Errorf("-only %q -skip %q: workload inbox selected = %v, its parts %q", c.only, c.skip, s.selectedWorkload(workload{name: "inbox"}), got)
		}
	}
}

// On each store's server, the inbox consumer applies every record once
// and the effect table's counts say so; the plain consumer handed the
// records twice leaves n duplicates, which the same counts report (so
// the check of a real run can fail).
func TestInboxTargetsCountEffectsOnTheirServers(t *testing.T) {
	// Not parallel: the targets use the harness's schema, database and
	// key prefixes, which other tests of the package recreate.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	defer pool.Close()
	ropt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	my, err := dialMySQL(ctx, testenv.MySQLURL())
	if err != nil {
		testenv.Unavailable(t, "MySQL", "OUTBOX_MYSQL_URL", err)
	}
	defer func() {
		_, _ = my.db.Exec("DROP DATABASE IF EXISTS " + mysqlBenchDB)
		my.db.Close()
	}()
	s := &Suite{pool: pool, rdb: rdb, keep: map[string]any{"mysql": my}, acc: map[string]*series{}}
	defer func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schemaInbox+" CASCADE") }()

	const n = 150
	recs := inboxRecords(n, 3)
	cluster, err := inboxCluster(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	mt, err := s.mysqlInboxTarget(ctx)
	if err != nil || mt == nil {
		t.Fatalf("the MySQL target: %v", err)
	}
	t.Run("postgres", func(t *testing.T) {
		checkInboxTarget(ctx, t, s.pgInboxTarget(), cluster, n)
		// The group row's run: two kafkainbox consumers.
		c, _, _, err := inboxGroupRun(ctx, s.pgInboxTarget(), cluster, n, 2, nextOffsets(recs))
		if err != nil || c.Delivered != n {
			t.Errorf("a group of 2: %+v, %v", c, err)
		}
	})
	t.Run("mysql", func(t *testing.T) { checkInboxTarget(ctx, t, *mt, cluster, n) })
	t.Run("redis", func(t *testing.T) { checkInboxTarget(ctx, t, s.redisInboxTarget(), cluster, n) })
}

func checkInboxTarget[Tx any](ctx context.Context, t *testing.T, target inboxTarget[Tx], cluster *kfake.Cluster, n int) {
	for _, batch := range []int{1, 25} {
		c, _, err := inboxRun(ctx, target, cluster, n, batch, inboxConsumer, newPhases())
		if err != nil {
			t.Fatalf("the inbox consumer, %d per tx: %v", batch, err)
		}
		if c.Delivered != n || c.Duplicates != 0 || c.Foreign != 0 || c.OrderViolations != 0 {
			t.Errorf("the inbox consumer, %d per tx: %+v, want every record once", batch, c)
		}
	}
	side, err := target.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer side.close()
	for range 2 {
		if _, err := consumeN(ctx, cluster, n, 25, plainHandler(side, newPhases())); err != nil {
			t.Fatal(err)
		}
	}
	c, err := side.counts(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if c.Delivered != n || c.Duplicates != n || c.check(false) == nil {
		t.Errorf("the plain consumer run twice: %+v, want %d delivered and %d duplicates, and the check to fail", c, n, n)
	}
}

// The timed store has the optional interfaces of the store it times, so
// the Inbox takes the same path with it as without; split hides them.
func TestTimedStoreKeepsTheStoresOptionalInterfaces(t *testing.T) {
	t.Parallel()
	m := inbox.NewMemory()
	for _, split := range []bool{false, true} {
		st := timeStore[*inbox.MemoryTx](m, newPhases(), split)
		_, kr := st.(inbox.KeyRecorder[*inbox.MemoryTx])
		_, fin := st.(inbox.Finisher[*inbox.MemoryTx])
		if kr == split || fin == split {
			t.Errorf("split %v: KeyRecorder %v, Finisher %v", split, kr, fin)
		}
	}
	// And the Inbox uses them: the phases name the combined calls.
	ctx := context.Background()
	for _, c := range []struct {
		split bool
		want  []string
	}{{false, []string{"begin", "RecordWithKeySeqs", "Finish", "commit"}}, {true, []string{"begin", "Record", "KeySeqs", "SetKeySeqs", "SaveOffsets", "commit"}}} {
		p := newPhases()
		ib, err := inbox.New(timeStore[*inbox.MemoryTx](inbox.NewMemory(), p, c.split), inbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m := inbox.Message{ID: "a", Key: "k", Seq: 1, Offset: &inbox.Offset{Group: "g", Topic: "t", Next: 1}}
		if _, err := ib.Handle(ctx, m, func(context.Context, *inbox.MemoryTx, inbox.Message) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.order, c.want) {
			t.Errorf("split %v: phases %q, want %q", c.split, p.order, c.want)
		}
	}
}
