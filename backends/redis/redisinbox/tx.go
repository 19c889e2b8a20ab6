package redisinbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/inbox"
)

// Tx is one transaction of a [Store]: a connection holding the
// transaction's WATCHes (a go-redis *redis.Tx) and the MULTI its writes
// are queued in ([Tx.Pipe]), which [Store.InTx] sends with EXEC when fn
// returns nil. The store's methods WATCH and read through the connection
// and queue their writes in the MULTI; so does the handler.
//
// A Tx is meant for the goroutine running fn, and only until fn returns:
// afterwards its methods return an error (the Pipe's commands are never
// sent).
type Tx struct {
	s    *Store
	rtx  *redis.Tx
	pipe redis.Pipeliner

	nowMS    int64           // the server's time in ms (TIME, read once), 0 until read
	recorded map[string]bool // IDs Record reported new in this transaction
	// rawWatch: a WATCH was sent in a pipeline, which go-redis does not
	// track (it sends UNWATCH on close only after its own Tx.Watch); InTx
	// sends UNWATCH itself when EXEC did not release it.
	rawWatch bool
	done     bool
}

// Pipe returns the transaction's MULTI: the handler queues its effects in
// it (for example tx.Pipe().HIncrBy(ctx, store.Key("balance:42"), "cents",
// 500)), and they are applied at EXEC together with the inbox's records,
// or not at all when fn returns an error, a WATCHed key changed, or Redis
// refused a command when it was queued.
//
// What Pipe holds is not sent before EXEC, so a command's result (its
// Cmder) is ready only after InTx returned nil; read with [Tx.WatchRead]
// instead. On Redis Cluster every key queued must carry the inbox's hash
// tag (see [Store.Key]), else the commit fails and nothing is applied.
// Do not call Exec, Discard or Pipelined on it: InTx owns the EXEC.
//
// Redis does not roll back a command that fails at run time inside EXEC
// (a command on a key of the wrong type): the others, the records
// included, are applied, and InTx returns an [*ExecError].
func (tx *Tx) Pipe() redis.Pipeliner { return tx.pipe }

// Watch WATCHes keys for the transaction, in one round trip: when another
// client writes one of them before EXEC, the commit fails with an error
// for which [Store.Retryable] is true and nothing is applied (inbox.Inbox
// runs the transaction again). Use it for an effect computed from a value
// the handler read; see [Tx.WatchRead] to read in the same round trip.
// On Redis Cluster each key must carry the inbox's hash tag. No keys does
// nothing.
func (tx *Tx) Watch(ctx context.Context, keys ...string) error {
	return tx.WatchRead(ctx, keys, nil)
}

// WatchRead WATCHes keys (see [Tx.Watch]) and runs the reads read queues,
// after the WATCH, in one round trip on the transaction's connection: the
// results, in the Cmders read created, are the committed values of the
// keys (not the writes queued in Pipe). Should a watched key change before
// EXEC, the commit fails with a retryable error, so an effect computed
// from these values is applied only while they still hold. read must
// queue only reads (GET, HGET, ...): a
// write there is applied at once, outside the transaction. A read of a
// missing key (redis.Nil) is not an error; any other failed read's error
// is returned. A nil read only WATCHes.
func (tx *Tx) WatchRead(ctx context.Context, keys []string, read func(p redis.Pipeliner)) error {
	if err := tx.check(ctx, tx.s); err != nil {
		return err
	}
	if err := tx.s.checkTags(keys); err != nil {
		return err
	}
	if len(keys) == 0 && read == nil {
		return nil
	}
	_, err := tx.rtx.Pipelined(ctx, func(p redis.Pipeliner) error {
		if len(keys) > 0 {
			tx.watch(ctx, p, keys)
		}
		if read != nil {
			read(p)
		}
		return nil
	})
	if err == redis.Nil {
		err = nil
	}
	return tx.s.wrap(ctx, "Tx.WatchRead", err)
}

// watch queues a WATCH of keys in p, a pipeline on the transaction's
// connection.
func (tx *Tx) watch(ctx context.Context, p redis.Pipeliner, keys []string) {
	args := make([]any, 0, len(keys)+1)
	args = append(args, "watch")
	for _, k := range keys {
		args = append(args, k)
	}
	tx.rawWatch = true
	p.Do(ctx, args...)
}

// now returns the transaction's time in ms: the server's, read with TIME
// once per transaction (by Record's round trip, else here, in one more).
func (tx *Tx) now(ctx context.Context) (int64, error) {
	if tx.nowMS == 0 {
		t, err := tx.rtx.Time(ctx).Result()
		if err != nil {
			return 0, err
		}
		tx.nowMS = max(t.UnixMilli(), 1)
	}
	return tx.nowMS, nil
}

// setNow records the server time t, as read by a pipelined TIME.
func (tx *Tx) setNow(t time.Time) { tx.nowMS = max(t.UnixMilli(), 1) }

// check reports whether tx is a live transaction of s and ctx has not
// ended.
//
// go-redis does not look at a context unless its client has
// ContextTimeoutEnabled, so the checks of ctx (here and in InTx, commit,
// Offsets and Purge) are what make an ended context fail a call and roll
// its transaction back, as the Store contract says.
func (tx *Tx) check(ctx context.Context, s *Store) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if tx == nil || tx.s != s {
		return fmt.Errorf("redisinbox: a transaction of another Store, or nil; use the Tx this store's InTx passes to fn: %w", inbox.ErrInvalidArgument)
	}
	if tx.done {
		return fmt.Errorf("redisinbox: the transaction is finished (its InTx returned); use a Tx only inside the fn it was passed to: %w", inbox.ErrInvalidArgument)
	}
	return nil
}

// commit sends the queued writes with EXEC. A transaction that queued
// nothing has nothing to apply: its WATCHes are released by finish.
func (tx *Tx) commit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // not sent: nothing is applied
	}
	if tx.pipe.Len() == 0 {
		return nil
	}
	cmds, err := tx.pipe.Exec(ctx)
	var rerr redis.Error
	if err == nil || errors.As(err, &rerr) {
		tx.rawWatch = false // EXEC ran (or was refused): the server dropped the WATCHes
	}
	return tx.s.execErr(ctx, cmds, err)
}

// finish ends tx however fn ended (a commit, an error, a panic): a WATCH
// that EXEC did not release is released with UNWATCH (one round trip, on
// the paths without EXEC only), so it cannot linger on the pooled
// connection and fail a later, unrelated transaction.
func (tx *Tx) finish(ctx context.Context) {
	tx.done = true
	tx.pipe.Discard()
	if tx.rawWatch {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.rtx.Unwatch(ctx).Err() // a failure breaks the connection, which go-redis then drops
	}
}
