package redisinbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/backends/redis/redisinbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

var errAbort = errors.New("abort")

// record records ids in a transaction of their own.
func record(t *testing.T, s *redisinbox.Store, ids ...string) []bool {
	t.Helper()
	var fresh []bool
	require.NoError(t, s.InTx(testCtx(t), func(ctx context.Context, tx *redisinbox.Tx) error {
		var err error
		fresh, err = s.Record(ctx, tx, ids)
		return err
	}))
	return fresh
}

func TestPrefixIsValidated(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // New does no I/O
	defer c.Close()
	for prefix, want := range map[string]string{
		"":             "",
		"{inbox}":      "",
		"app:{orders}": "",
		"inbox":        "has no hash tag",
		"app:orders":   "has no hash tag",
		"{a}{b}":       "exactly one '{' and one '}'",
		"{a":           "exactly one '{' and one '}'",
		"}a{":          "'}' before '{'",
		"app:{}":       "empty hash tag",
	} {
		s, err := redisinbox.New(c, redisinbox.Options{Prefix: prefix})
		if want == "" {
			require.NoError(t, err, prefix)
			continue
		}
		require.Error(t, err, prefix)
		assert.Nil(t, s)
		assert.ErrorIs(t, err, inbox.ErrInvalidArgument, prefix)
		assert.Contains(t, err.Error(), want, prefix)
		assert.Contains(t, err.Error(), "redisinbox: Options.Prefix", prefix)
		assert.Contains(t, err.Error(), `for example "{inbox}"`, "the error says what to do")
	}
	s, err := redisinbox.New(c, redisinbox.Options{})
	require.NoError(t, err)
	assert.Equal(t, "{inbox}", s.Prefix())
	assert.Equal(t, "{inbox}", s.HashTag())
	assert.Equal(t, "{inbox}:balance:42", s.Key("balance:42"))
	s, err = redisinbox.New(c, redisinbox.Options{Prefix: "billing:{in}:v2"})
	require.NoError(t, err)
	assert.Equal(t, "{in}", s.HashTag())
	_, err = redisinbox.New(nil, redisinbox.Options{})
	require.ErrorIs(t, err, inbox.ErrInvalidArgument)
}

// TestKeysShareOneSlot: on Cluster, every key of the inbox and Key's keys
// hash to one slot.
func TestKeysShareOneSlot(t *testing.T) {
	t.Parallel()
	c := clusterClient(t, nil)
	ctx := testCtx(t)
	s := newStore(t, c)
	want, err := c.ClusterKeySlot(ctx, s.Prefix()+":ids").Result()
	require.NoError(t, err)
	for _, k := range []string{s.Prefix() + ":seqs", s.Prefix() + ":offsets", s.Prefix() + ":anchor", s.Prefix() + ":id:x{y}z", s.Prefix() + ":seq:{k}", s.Key("effect"), "other:" + s.HashTag() + ":x"} {
		got, err := c.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, got, k)
	}
}

// TestConcurrentHandlersOfOneID: two consumers handle the same message at
// once; both see it as new and run the handler, and exactly one EXEC
// applies it. With retries (the default) the other runs again through
// inbox.Inbox and reports a duplicate; without, its error is retryable.
func TestConcurrentHandlersOfOneID(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		for _, attempts := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/MaxAttempts%d", tg.name, attempts), func(t *testing.T) {
				t.Parallel()
				c := tg.client(t)
				s := newStore(t, c)
				ctx := testCtx(t)
				ib, err := inbox.New(s, inbox.Options{MaxAttempts: attempts})
				require.NoError(t, err)
				effect := s.Key("effect")

				// Neither handler returns before both ran, so both
				// transactions read the ID as new before either commits.
				var ran atomic.Int32
				var arrived sync.WaitGroup
				arrived.Add(2)
				h := func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
					if ran.Add(1) <= 2 {
						arrived.Done()
						arrived.Wait()
					}
					tx.Pipe().Incr(ctx, effect)
					return nil
				}
				type result struct {
					r   inbox.Result
					err error
				}
				results := make(chan result, 2)
				for range 2 {
					go func() {
						r, err := ib.Handle(ctx, inbox.Message{ID: "same"}, h)
						results <- result{r, err}
					}()
				}
				var outcomes []string
				for range 2 {
					select {
					case res := <-results:
						if res.err != nil {
							require.Equal(t, 1, attempts, "with retries both succeed: %v", res.err)
							require.True(t, s.Retryable(res.err), "the losing commit's error is retryable: %v", res.err)
							require.ErrorIs(t, res.err, redis.TxFailedErr)
							outcomes = append(outcomes, "conflict")
							continue
						}
						outcomes = append(outcomes, res.r.Outcome.String())
					case <-ctx.Done():
						t.Fatal("watchdog: the handlers did not finish")
					}
				}
				slices.Sort(outcomes)
				if attempts == 1 {
					assert.Equal(t, []string{"applied", "conflict"}, outcomes)
				} else {
					assert.Equal(t, []string{"applied", "duplicate"}, outcomes)
				}
				assert.Equal(t, int32(2), ran.Load(), "the handler ran in both transactions and not again on the retry")
				n, err := c.Get(ctx, effect).Int()
				require.NoError(t, err)
				assert.Equal(t, 1, n, "the effect is applied once")
			})
		}
	}
}

// TestStoreConflicts: a transaction that read an ID or a key's number
// fails its commit, retryably and applying nothing, when another commits a
// write of it first.
func TestStoreConflicts(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			s := newStore(t, c)
			ctx := testCtx(t)

			err := s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				fresh, err := s.Record(ctx, tx, []string{"a"})
				require.NoError(t, err)
				require.Equal(t, []bool{true}, fresh)
				tx.Pipe().Set(ctx, s.Key("loser"), "1", 0)
				require.Equal(t, []bool{true}, record(t, s, "a"), "another transaction records it first")
				return nil
			})
			require.Error(t, err)
			assert.True(t, s.Retryable(err), "%v", err)
			assert.Contains(t, err.Error(), "run it again")
			assert.Zero(t, c.Exists(ctx, s.Key("loser")).Val(), "nothing of the losing transaction is applied")

			err = s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				seqs, err := s.KeySeqs(ctx, tx, []string{"k"})
				require.NoError(t, err)
				require.Empty(t, seqs)
				require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx2 *redisinbox.Tx) error {
					return s.SetKeySeqs(ctx, tx2, map[string]int64{"k": 1})
				}))
				return s.SetKeySeqs(ctx, tx, map[string]int64{"k": 5})
			})
			assert.True(t, s.Retryable(err), "%v", err)
			require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				seqs, err := s.KeySeqs(ctx, tx, []string{"k"})
				require.NoError(t, err)
				assert.Equal(t, map[string]int64{"k": 1}, seqs, "the losing SetKeySeqs is not applied")
				return nil
			}))

			assert.False(t, s.Retryable(nil))
			assert.False(t, s.Retryable(errAbort))
			assert.False(t, s.Retryable(context.Canceled))
			assert.False(t, s.Retryable(fmt.Errorf("x: %w, %w", redis.TxFailedErr, context.DeadlineExceeded)))
		})
	}
}

// TestEffectsCommitWithTheRecord: what the handler queues in Pipe is
// applied with the record, and neither is when the transaction rolls back
// (an error, a panic, a failed handler under inbox.Inbox).
func TestEffectsCommitWithTheRecord(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			s := newStore(t, c)
			ctx := testCtx(t)
			ib, err := inbox.New(s, inbox.Options{})
			require.NoError(t, err)

			r, err := ib.Handle(ctx, inbox.Message{ID: "m1"}, func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
				tx.Pipe().HSet(ctx, s.Key("order:1"), "state", "paid")
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, inbox.Applied, r.Outcome)
			assert.Equal(t, "paid", c.HGet(ctx, s.Key("order:1"), "state").Val())
			assert.Equal(t, []bool{false}, record(t, s, "m1"))

			_, err = ib.Handle(ctx, inbox.Message{ID: "m2"}, func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
				tx.Pipe().HSet(ctx, s.Key("order:2"), "state", "paid")
				return errAbort
			})
			require.ErrorIs(t, err, errAbort)

			err = s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				_, err := s.Record(ctx, tx, []string{"m3"})
				require.NoError(t, err)
				tx.Pipe().Set(ctx, s.Key("order:3"), "x", 0)
				return errAbort
			})
			require.ErrorIs(t, err, errAbort)
			assert.Equal(t, errAbort, err, "InTx returns fn's error as it is")

			func() {
				defer func() { assert.Equal(t, "boom", recover()) }()
				_ = s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
					_, err := s.Record(ctx, tx, []string{"m4"})
					require.NoError(t, err)
					tx.Pipe().Set(ctx, s.Key("order:4"), "x", 0)
					panic("boom")
				})
			}()

			assert.Zero(t, c.Exists(ctx, s.Key("order:2"), s.Key("order:3"), s.Key("order:4")).Val(), "no effect of a rolled-back transaction is applied")
			assert.Equal(t, []bool{true, true, true}, record(t, s, "m2", "m3", "m4"), "no record of a rolled-back transaction stays")
		})
	}
}

// TestRollbackReleasesWatches: a transaction that ends without EXEC (an
// error, a panic, nothing queued) leaves no WATCH on its pooled
// connection, where it would fail the next transaction of the client.
func TestRollbackReleasesWatches(t *testing.T) {
	t.Parallel()
	ends := map[string]func(ctx context.Context, s *redisinbox.Store, tx *redisinbox.Tx) error{
		"Error": func(ctx context.Context, s *redisinbox.Store, tx *redisinbox.Tx) error { return errAbort },
		"Panic": func(ctx context.Context, s *redisinbox.Store, tx *redisinbox.Tx) error { panic("boom") },
		"NothingQueued": func(ctx context.Context, s *redisinbox.Store, tx *redisinbox.Tx) error {
			tx.Pipe().Discard() // drop the record: EXEC is not sent
			return nil
		},
		"OnlyWatched": func(ctx context.Context, s *redisinbox.Store, tx *redisinbox.Tx) error {
			tx.Pipe().Discard()
			return tx.Watch(ctx, s.Key("watched"))
		},
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := standaloneClient(t, func(o *redis.Options) { o.PoolSize, o.PipelinePoolSize = 1, -1 }) // one connection, reused
			other := standaloneClient(t, nil)
			s := newStore(t, c)
			ctx := testCtx(t)
			func() {
				defer func() { _ = recover() }()
				_ = s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
					_, err := s.Record(ctx, tx, []string{"x"})
					require.NoError(t, err)
					_, err = s.KeySeqs(ctx, tx, []string{"k"})
					require.NoError(t, err)
					return end(ctx, s, tx)
				})
			}()
			// Another client writes the keys the transaction watched; a
			// WATCH left on the connection would fail this EXEC.
			require.NoError(t, other.Set(ctx, s.Prefix()+":id:x", 1, 0).Err())
			require.NoError(t, other.Set(ctx, s.Prefix()+":seq:k", 1, 0).Err())
			require.NoError(t, other.Set(ctx, s.Key("watched"), 1, 0).Err())
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, s.Key("after"), 1, 0)
				return nil
			})
			require.NoError(t, err, "a WATCH of the ended transaction lingered on the connection")
		})
	}
}

// TestWatchReadRetriesOnAChangedValue: an effect computed from a value the
// handler read with WatchRead is not applied when the value changed
// before EXEC; inbox.Inbox runs the transaction again on the new value.
func TestWatchReadRetriesOnAChangedValue(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			s := newStore(t, c)
			ctx := testCtx(t)
			ib, err := inbox.New(s, inbox.Options{})
			require.NoError(t, err)
			balance, limit := s.Key("balance"), s.Key("limit")
			require.NoError(t, c.Set(ctx, balance, 100, 0).Err())

			attempts := 0
			r, err := ib.Handle(ctx, inbox.Message{ID: "credit"}, func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
				attempts++
				var get, missing *redis.StringCmd
				err := tx.WatchRead(ctx, []string{balance, limit}, func(p redis.Pipeliner) {
					get = p.Get(ctx, balance)
					missing = p.Get(ctx, limit)
				})
				if err != nil {
					return err
				}
				require.ErrorIs(t, missing.Err(), redis.Nil, "a missing key reads as redis.Nil, not an error of WatchRead")
				v, err := get.Int64()
				if err != nil {
					return err
				}
				if attempts == 1 {
					require.NoError(t, c.IncrBy(ctx, balance, 1000).Err()) // another client, before EXEC
				}
				tx.Pipe().Set(ctx, balance, v+5, 0)
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, inbox.Applied, r.Outcome)
			assert.Equal(t, 2, attempts)
			n, err := c.Get(ctx, balance).Int()
			require.NoError(t, err)
			assert.Equal(t, 1105, n, "the effect is computed from the value as committed at EXEC")
		})
	}
}

// TestClusterKeysOutsideTheSlot: on Cluster, an effect on a key without
// the inbox's hash tag fails the commit, naming the rule, and nothing is
// applied; Watch refuses such a key before sending it.
func TestClusterKeysOutsideTheSlot(t *testing.T) {
	t.Parallel()
	c := clusterClient(t, nil)
	s := newStore(t, c)
	ctx := testCtx(t)
	for _, stray := range strayKeys(t, c, s) {
		t.Cleanup(func() { c.Del(context.Background(), stray) })
		err := s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
			_, err := s.Record(ctx, tx, []string{"m"})
			require.NoError(t, err)
			tx.Pipe().Set(ctx, stray, 1, 0)
			return nil
		})
		require.Error(t, err, stray)
		assert.Contains(t, err.Error(), "Store.Key", stray)
		assert.Contains(t, err.Error(), "nothing of the transaction was applied", stray)
		assert.False(t, s.Retryable(err))
		assert.Zero(t, c.Exists(ctx, stray).Val())
	}
	assert.Equal(t, []bool{true}, record(t, s, "m"), "the record of the refused transactions was not applied")

	err := s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
		return tx.Watch(ctx, s.Key("ok"), "no-tag")
	})
	require.ErrorIs(t, err, inbox.ErrInvalidArgument)
	assert.Contains(t, err.Error(), `"no-tag"`)
}

// strayKeys returns keys outside the inbox's slot: two on its master
// (which Redis refuses at EXEC, CROSSSLOT) and two on other masters
// (refused when queued, MOVED).
func strayKeys(t *testing.T, c *redis.ClusterClient, s *redisinbox.Store) []string {
	t.Helper()
	ctx := testCtx(t)
	anchor := s.Prefix() + ":anchor"
	slot := c.ClusterKeySlot(ctx, anchor).Val()
	master, err := c.MasterForKey(ctx, anchor)
	require.NoError(t, err)
	var same, other []string
	for i := 0; len(same) < 2 || len(other) < 2; i++ {
		require.Less(t, i, 10000, "no stray keys found")
		k := fmt.Sprintf("test:stray:%s:%d", strings.Trim(s.HashTag(), "{}"), i)
		if c.ClusterKeySlot(ctx, k).Val() == slot {
			continue
		}
		m, err := c.MasterForKey(ctx, k)
		require.NoError(t, err)
		if m.Options().Addr == master.Options().Addr {
			if len(same) < 2 {
				same = append(same, k)
			}
		} else if len(other) < 2 {
			other = append(other, k)
		}
	}
	return append(same, other...)
}

// TestClusterSlotMoved: when go-redis's slot map sends a transaction to a
// master that no longer holds the inbox's slot (a resharding or failover
// it has not seen), the transaction fails with a retryable error and
// applies nothing, the map is reloaded, and inbox.Inbox's retry applies
// the message.
func TestClusterSlotMoved(t *testing.T) {
	t.Parallel()
	real := clusterClient(t, nil)
	ctx := testCtx(t)
	prefix := uniquePrefix()
	slots, err := real.ClusterSlots(ctx).Result()
	require.NoError(t, err)
	owner, err := real.MasterForKey(ctx, prefix+":anchor")
	require.NoError(t, err)
	wrong := ""
	for _, sl := range slots {
		if a := sl.Nodes[0].Addr; a != owner.Options().Addr {
			wrong = a
		}
	}
	require.NotEmpty(t, wrong)
	var loads atomic.Int32
	c := clusterClient(t, func(o *redis.ClusterOptions) {
		o.ClusterSlots = func(ctx context.Context) ([]redis.ClusterSlot, error) {
			if loads.Add(1) == 1 { // a stale map: every slot on the wrong master
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: wrong}}}}, nil
			}
			return slots, nil
		}
	})
	s, err := redisinbox.New(c, redisinbox.Options{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() { deletePrefix(real, prefix) })
	h := func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
		tx.Pipe().Incr(ctx, s.Key("effect"))
		return nil
	}

	once, err := inbox.New(s, inbox.Options{MaxAttempts: 1})
	require.NoError(t, err)
	_, err = once.Handle(ctx, inbox.Message{ID: "m"}, h)
	require.Error(t, err)
	assert.True(t, s.Retryable(err), "%v", err)
	assert.Contains(t, err.Error(), "slot moved")

	ib, err := inbox.New(s, inbox.Options{})
	require.NoError(t, err)
	r, err := ib.Handle(ctx, inbox.Message{ID: "m"}, h)
	require.NoError(t, err)
	assert.Equal(t, inbox.Applied, r.Outcome)
	assert.GreaterOrEqual(t, loads.Load(), int32(2), "the slot map was reloaded")
	assert.Equal(t, "1", real.Get(ctx, s.Key("effect")).Val())
}

// TestExecErrorAtRunTime: a queued command that fails inside EXEC does not
// undo the others (Redis has no rollback): the record stays, and InTx says
// so with an ExecError that is not retryable.
func TestExecErrorAtRunTime(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			s := newStore(t, c)
			ctx := testCtx(t)
			require.NoError(t, c.Set(ctx, s.Key("string"), "v", 0).Err())
			err := s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				_, err := s.Record(ctx, tx, []string{"e1"})
				require.NoError(t, err)
				tx.Pipe().Get(ctx, s.Key("missing")) // redis.Nil is no failure
				tx.Pipe().Set(ctx, s.Key("effect"), "1", 0)
				tx.Pipe().HIncrBy(ctx, s.Key("string"), "f", 1) // WRONGTYPE at run time
				return nil
			})
			var ee *redisinbox.ExecError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 4, ee.Index, "MSET ids, ZADD ids, GET, SET, HINCRBY")
			assert.Equal(t, "hincrby", ee.Name)
			assert.Contains(t, ee.Err.Error(), "WRONGTYPE")
			assert.Contains(t, err.Error(), "repair the effect by hand")
			assert.False(t, s.Retryable(err))
			assert.Equal(t, "1", c.Get(ctx, s.Key("effect")).Val())
			assert.Equal(t, []bool{false}, record(t, s, "e1"), "the record was applied with the rest")

			// A read of a missing key alone does not fail a commit.
			require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				_, err := s.Record(ctx, tx, []string{"e2"})
				require.NoError(t, err)
				tx.Pipe().Get(ctx, s.Key("missing"))
				return nil
			}))
		})
	}
}

// TestTxAfterInTx: a Tx used after its InTx returned is refused.
func TestTxAfterInTx(t *testing.T) {
	t.Parallel()
	c := standaloneClient(t, nil)
	s := newStore(t, c)
	ctx := testCtx(t)
	var leaked *redisinbox.Tx
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
		leaked = tx
		return nil
	}))
	_, err := s.Record(ctx, leaked, []string{"a"})
	require.ErrorIs(t, err, inbox.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "finished")
	require.ErrorIs(t, leaked.Watch(ctx, s.Key("a")), inbox.ErrInvalidArgument)
	require.ErrorIs(t, s.SetKeySeqs(ctx, leaked, map[string]int64{"k": 1}), inbox.ErrInvalidArgument)
	other := newStore(t, c)
	require.NoError(t, other.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
		_, err := s.Record(ctx, tx, []string{"a"})
		require.ErrorIs(t, err, inbox.ErrInvalidArgument, "a Tx of another store")
		return nil
	}))
	_, err = s.Record(ctx, nil, []string{"a"})
	require.ErrorIs(t, err, inbox.ErrInvalidArgument)
}

// TestRoundTrips counts what a transaction sends to the server (see
// "# Transactions" in the package doc).
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	clients := map[string]struct {
		extra  int64 // the anchor WATCH of a transaction through a Ring
		client func(t *testing.T, rt *roundTrips) redis.UniversalClient
	}{
		"Standalone": {0, func(t *testing.T, rt *roundTrips) redis.UniversalClient {
			c := standaloneClient(t, nil)
			c.AddHook(rt)
			return c
		}},
		"Cluster": {0, func(t *testing.T, rt *roundTrips) redis.UniversalClient {
			return clusterClient(t, func(o *redis.ClusterOptions) {
				o.NewClient = func(opt *redis.Options) *redis.Client {
					n := redis.NewClient(opt)
					n.AddHook(rt)
					return n
				}
			})
		}},
		"Ring": {1, func(t *testing.T, rt *roundTrips) redis.UniversalClient {
			opt, err := redis.ParseURL(testenv.RedisURL())
			require.NoError(t, err)
			standaloneClient(t, nil) // the server answers
			r := redis.NewRing(&redis.RingOptions{
				Addrs: map[string]string{"one": opt.Addr}, Username: opt.Username, Password: opt.Password, DB: opt.DB,
				NewClient: func(o *redis.Options) *redis.Client {
					n := redis.NewClient(o)
					n.AddHook(rt)
					return n
				},
			})
			t.Cleanup(func() { _ = r.Close() })
			return r
		}},
	}
	keyed := func(id string, seq int64) inbox.Message {
		return inbox.Message{ID: id, Key: "k", Seq: seq, Offset: &inbox.Offset{Group: "g", Topic: "t", Next: seq}}
	}
	for name, tc := range clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := &roundTrips{}
			c := tc.client(t, rt)
			s := newStore(t, c)
			sp := &combinedSpy{Store: s}
			ctx := testCtx(t)
			ib, err := inbox.New[*redisinbox.Tx](sp, inbox.Options{})
			require.NoError(t, err)
			h := func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
				tx.Pipe().Incr(ctx, s.Key("effect"))
				return nil
			}
			_, err = ib.Handle(ctx, inbox.Message{ID: "warm-up"}, h) // dials, loads the slot map
			require.NoError(t, err)
			for _, step := range []struct {
				name    string
				msgs    []inbox.Message
				want    int64
				keySeqs bool // a KeySeqs round trip of its own, unless the Inbox uses RecordWithKeySeqs
			}{
				{"New", []inbox.Message{{ID: "a"}}, 2, false},                     // Record, EXEC
				{"Duplicate", []inbox.Message{{ID: "a"}}, 2, false},               // Record, UNWATCH
				{"NewWithSeq", []inbox.Message{keyed("b", 1)}, 3, true},           // Record, KeySeqs, EXEC
				{"DuplicateWithOffset", []inbox.Message{keyed("b", 1)}, 2, false}, // Record, EXEC (the offset)
				{"Batch", []inbox.Message{keyed("c", 2), keyed("d", 3), {ID: "e"}, {ID: "a"}}, 3, true},
			} {
				rt.n.Store(0)
				sp.calls.Store(0)
				_, err := ib.HandleBatch(ctx, step.msgs, h)
				require.NoError(t, err)
				want := step.want + tc.extra
				if step.keySeqs && sp.calls.Load() > 0 {
					want-- // an Inbox that knows KeyRecorder: Record and KeySeqs in one round trip
				}
				assert.Equal(t, want, rt.n.Load(), step.name)
			}
			n, err := c.Get(ctx, s.Key("effect")).Int()
			require.NoError(t, err)
			assert.Equal(t, 6, n)
		})
	}
}

// combinedSpy counts the calls of RecordWithKeySeqs an Inbox makes (it
// makes them when it knows the optional KeyRecorder interface).
type combinedSpy struct {
	*redisinbox.Store
	calls atomic.Int32
}

func (s *combinedSpy) RecordWithKeySeqs(ctx context.Context, tx *redisinbox.Tx, ids, keys []string) ([]bool, map[string]int64, error) {
	s.calls.Add(1)
	return s.Store.RecordWithKeySeqs(ctx, tx, ids, keys)
}

// TestOffsets: SaveOffsets overwrites a partition's offset, Offsets reads
// one group and topic's, and names that would run together stay apart.
func TestOffsets(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			s := newStore(t, c)
			ctx := testCtx(t)
			save := func(offs ...inbox.Offset) {
				require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
					return s.SaveOffsets(ctx, tx, offs)
				}))
			}
			save(inbox.Offset{Group: "a:b", Topic: "c", Partition: 0, Next: 10},
				inbox.Offset{Group: "a", Topic: "b:c", Partition: 0, Next: 20},
				inbox.Offset{Group: "a", Topic: "b:c", Partition: 1, Next: 21})
			save(inbox.Offset{Group: "a", Topic: "b:c", Partition: 1, Next: 5}) // overwrites
			save()
			for _, tc := range []struct {
				group, topic string
				want         map[int32]int64
			}{
				{"a:b", "c", map[int32]int64{0: 10}},
				{"a", "b:c", map[int32]int64{0: 20, 1: 5}},
				{"a", "b", map[int32]int64{}},
				{"", "", map[int32]int64{}},
			} {
				got, err := s.Offsets(ctx, tc.group, tc.topic)
				require.NoError(t, err)
				assert.Equal(t, tc.want, got, "%q %q", tc.group, tc.topic)
			}
			require.NoError(t, c.HSet(ctx, s.Prefix()+":offsets", "1:g1:t:0", "x").Err())
			_, err := s.Offsets(ctx, "g", "t")
			require.Error(t, err)
			assert.Contains(t, err.Error(), "HSET")
		})
	}
}

// TestKeySeqs: numbers set in a transaction are read back by the next, a
// corrupt value is an error naming the key, and no keys reads nothing.
func TestKeySeqs(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			s := newStore(t, c)
			ctx := testCtx(t)
			require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				got, err := s.KeySeqs(ctx, tx, nil)
				require.NoError(t, err)
				require.NotNil(t, got)
				require.Empty(t, got)
				require.NoError(t, s.SetKeySeqs(ctx, tx, nil))
				return s.SetKeySeqs(ctx, tx, map[string]int64{"k1": 3, "k{2}": 7}) // no Record: TIME in a round trip of its own
			}))
			require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				got, err := s.KeySeqs(ctx, tx, []string{"k1", "k{2}", "k3"})
				require.NoError(t, err)
				assert.Equal(t, map[string]int64{"k1": 3, "k{2}": 7}, got)
				return nil
			}))
			require.NoError(t, c.Set(ctx, s.Prefix()+":seq:bad", "nope", 0).Err())
			err := s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				_, err := s.KeySeqs(ctx, tx, []string{"bad"})
				return err
			})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "DEL "+s.Prefix()+":seq:bad")
		})
	}
}

// TestPurge: Purge removes the oldest records below the horizon, at most
// limit of each kind per call, and leaves a candidate recorded again since
// it was listed.
func TestPurge(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			s := newStore(t, c)
			ctx := testCtx(t)
			for i, id := range []string{"p1", "p2", "p3", "p4"} {
				record(t, s, id)
				require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
					return s.SetKeySeqs(ctx, tx, map[string]int64{"key-" + id: 1})
				}))
				// p1 is the oldest, 4h ago; p4 was written now.
				backdate(t, c, s, time.Duration(3-i)*time.Hour, []string{id}, []string{"key-" + id})
			}
			_, _, err := s.Purge(ctx, time.Now(), 0)
			require.ErrorIs(t, err, inbox.ErrInvalidArgument)
			ids, keys, err := s.Purge(ctx, time.Now().Add(-4*time.Hour), 10)
			require.NoError(t, err)
			assert.Equal(t, [2]int{0, 0}, [2]int{ids, keys}, "nothing is older than 4h")

			horizon := time.Now().Add(-30 * time.Minute)
			ids, keys, err = s.Purge(ctx, horizon, 2)
			require.NoError(t, err)
			assert.Equal(t, [2]int{2, 2}, [2]int{ids, keys})
			assert.Equal(t, []bool{true, true, false, false}, record(t, s, "p1", "p2", "p3", "p4"), "the two oldest went first")
			ids, keys, err = s.Purge(ctx, horizon, 2)
			require.NoError(t, err)
			assert.Equal(t, [2]int{1, 1}, [2]int{ids, keys}, "p1 and p2 were recorded again just now")
			assert.Equal(t, []bool{false, false, true, false}, record(t, s, "p1", "p2", "p3", "p4"))
			require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				got, err := s.KeySeqs(ctx, tx, []string{"key-p1", "key-p2", "key-p3", "key-p4"})
				require.NoError(t, err)
				assert.Equal(t, map[string]int64{"key-p4": 1}, got, "purged keys are absent")
				return nil
			}))

			// A stale candidate (the ID was recorded again after the ZRANGE
			// that listed it) and a vanished one are left alone.
			res, err := redisinbox.RunPurgeScript(ctx, c,
				[]string{s.Prefix() + ":ids", s.Prefix() + ":seqs", s.Prefix() + ":id:p1", s.Prefix() + ":id:gone"},
				horizon.UnixMilli(), 2, "p1", "gone").Int64Slice()
			require.NoError(t, err)
			assert.Equal(t, []int64{0, 0}, res)
			assert.Equal(t, []bool{false}, record(t, s, "p1"))
		})
	}
}

// TestJanitor: inbox.PurgeOnce over the store empties it in batches.
func TestJanitor(t *testing.T) {
	t.Parallel()
	c := standaloneClient(t, nil)
	s := newStore(t, c)
	ctx := testCtx(t)
	ids := make([]string, 25)
	for i := range ids {
		ids[i] = fmt.Sprint("j", i)
	}
	record(t, s, ids...)
	record(t, s, "fresh")
	backdate(t, c, s, 2*time.Hour, ids, nil)
	n, _, err := inbox.PurgeOnce[*redisinbox.Tx](ctx, s, inbox.JanitorOptions{Retention: time.Hour, BatchSize: 10, Pause: time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, 25, n)
	assert.Equal(t, []string{"fresh"}, c.ZRange(ctx, s.Prefix()+":ids", 0, -1).Val())
	assert.Zero(t, c.Exists(ctx, s.Prefix()+":id:j0").Val())
}

// TestConsumersApplyEachMessageOnce: four consumers handle the same 60
// messages (over 3 keys, numbered), each in its own order and in batches,
// at once; every message's effect is applied exactly once and each key
// ends at its highest number.
func TestConsumersApplyEachMessageOnce(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			s := newStore(t, c)
			ctx := testCtx(t)
			ib, err := inbox.New(s, inbox.Options{MaxAttempts: 1000})
			require.NoError(t, err)
			const n, consumers = 60, 4
			msgs := make([]inbox.Message, n)
			for i := range msgs {
				msgs[i] = inbox.Message{ID: fmt.Sprint("m", i), Key: fmt.Sprint("k", i%3), Seq: int64(i/3 + 1)}
			}
			h := func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
				tx.Pipe().HIncrBy(ctx, s.Key("effects"), m.ID, 1)
				return nil
			}
			var applied atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, consumers)
			for w := range consumers {
				wg.Go(func() {
					// Consumer w takes batches of w+1 messages, the batches
					// in their order for even w, backwards for odd w.
					var batches [][]inbox.Message
					for b := range slices.Chunk(msgs, w+1) {
						batches = append(batches, b)
					}
					if w%2 == 1 {
						slices.Reverse(batches)
					}
					for _, b := range batches {
						rs, err := ib.HandleBatch(ctx, b, h)
						if err != nil {
							errs <- err
							return
						}
						for _, r := range rs {
							if r.Outcome == inbox.Applied {
								applied.Add(1)
							}
						}
					}
				})
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("watchdog: the consumers did not finish")
			}
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			assert.Equal(t, int64(n), applied.Load(), "each message applied by one consumer")
			effects, err := c.HGetAll(ctx, s.Key("effects")).Result()
			require.NoError(t, err)
			assert.Len(t, effects, n)
			for id, v := range effects {
				assert.Equal(t, "1", v, id)
			}
			require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				got, err := s.KeySeqs(ctx, tx, []string{"k0", "k1", "k2"})
				require.NoError(t, err)
				assert.Equal(t, map[string]int64{"k0": 20, "k1": 20, "k2": 20}, got)
				return nil
			}))
		})
	}
}

// TestRecordWithKeySeqs: Record and KeySeqs in one round trip, with the
// same answers and guards as the two calls; Finish sets numbers and
// offsets without one.
func TestRecordWithKeySeqs(t *testing.T) {
	t.Parallel()
	rt := &roundTrips{}
	c := standaloneClient(t, nil)
	c.AddHook(rt)
	s := newStore(t, c)
	ctx := testCtx(t)
	record(t, s, "old")
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
		return s.Finish(ctx, tx, map[string]int64{"k1": 4}, []inbox.Offset{{Group: "g", Topic: "t", Partition: 1, Next: 9}})
	}))

	rt.n.Store(0)
	err := s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
		fresh, seqs, err := s.RecordWithKeySeqs(ctx, tx, []string{"new", "old", "new"}, []string{"k1", "k2"})
		require.NoError(t, err)
		assert.Equal(t, []bool{true, false, false}, fresh)
		assert.Equal(t, map[string]int64{"k1": 4}, seqs)
		assert.Equal(t, int64(1), rt.n.Load(), "one round trip")
		fresh, seqs, err = s.RecordWithKeySeqs(ctx, tx, nil, nil)
		require.NoError(t, err)
		assert.Nil(t, fresh)
		assert.Equal(t, map[string]int64{}, seqs)
		_, _, err = s.RecordWithKeySeqs(ctx, tx, []string{""}, nil)
		require.ErrorIs(t, err, inbox.ErrInvalidMessage)
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx2 *redisinbox.Tx) error { // another consumer moves k2
			return s.SetKeySeqs(ctx, tx2, map[string]int64{"k2": 1})
		}))
		return s.Finish(ctx, tx, map[string]int64{"k1": 5, "k2": 1}, nil)
	})
	assert.True(t, s.Retryable(err), "a key read by RecordWithKeySeqs is guarded: %v", err)
	assert.Equal(t, []bool{true}, record(t, s, "new"), "nothing of the failed transaction was applied")
	offs, err := s.Offsets(ctx, "g", "t")
	require.NoError(t, err)
	assert.Equal(t, map[int32]int64{1: 9}, offs)
}

// TestPurgeDuringATransaction: Purge never waits for a transaction; one
// that WATCHed a record Purge removes fails its commit retryably, and run
// again finds the record gone.
func TestPurgeDuringATransaction(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			s := newStore(t, c)
			ctx := testCtx(t)
			record(t, s, "old")
			backdate(t, c, s, 2*time.Hour, []string{"old"}, nil)
			err := s.InTx(ctx, func(ctx context.Context, tx *redisinbox.Tx) error {
				fresh, err := s.Record(ctx, tx, []string{"old"})
				require.NoError(t, err)
				require.Equal(t, []bool{false}, fresh)
				ids, _, err := s.Purge(ctx, time.Now().Add(-time.Hour), 10)
				require.NoError(t, err)
				require.Equal(t, 1, ids, "Purge does not wait for the open transaction")
				return s.SaveOffsets(ctx, tx, []inbox.Offset{{Group: "g", Topic: "t", Next: 1}})
			})
			assert.True(t, s.Retryable(err), "%v", err)
			offs, err := s.Offsets(ctx, "g", "t")
			require.NoError(t, err)
			assert.Empty(t, offs, "nothing of the failed transaction was applied")
			assert.Equal(t, []bool{true}, record(t, s, "old"), "run again, the transaction finds the record gone")
		})
	}
}
