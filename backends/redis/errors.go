package redisoutbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// This file is where native errors (go-redis's, Redis's and the scripts'
// error replies and result codes) become the backend's errors: classify
// reads what an error is, mapErr maps it for a Backend call, and
// CheckExec (exec.go) uses classify for the caller's transactions.

// errClass is what classify finds a native error to be.
type errClass int

const (
	errOther      errClass = iota // anything else: wrapped with the call's name
	errContext                    // context.Canceled or DeadlineExceeded: passed through
	errClientGone                 // the go-redis client is closed: outbox.ErrClosed
	errSealed                     // an append refused by a sealed partition: *SealedError
	errKeyType                    // a key of the wrong type, or a counter that holds no integer
	errNoScript                   // EVALSHA of a script the server does not know
	errAborted                    // the transaction ran nothing (WATCH conflict, EXECABORT, CROSSSLOT)
	errCode                       // a script's negative result code (a scriptCode)
)

// classify reports what err is. It is the only code that reads the text of
// Redis's error replies.
func classify(err error) errClass {
	var sc scriptCode
	switch {
	case errors.As(err, &sc):
		return errCode
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return errContext
	case errors.Is(err, redis.ErrClosed):
		return errClientGone
	case errors.Is(err, redis.TxFailedErr):
		return errAborted
	}
	s := err.Error()
	switch {
	case strings.HasPrefix(s, "SEALED "):
		return errSealed
	case strings.Contains(s, "WRONGTYPE") || strings.Contains(s, "not an integer"):
		return errKeyType
	case strings.HasPrefix(s, "NOSCRIPT"):
		return errNoScript
	case strings.HasPrefix(s, "EXECABORT") || strings.HasPrefix(s, "CROSSSLOT"):
		return errAborted
	}
	return errOther
}

// isNoScript reports whether err is Redis not knowing a script's SHA.
func isNoScript(err error) bool {
	return err != nil && classify(err) == errNoScript
}

// scriptCode is a script's negative result code under lease, as an error
// for mapErr: -1 the lease is not held by the caller, -2 another owner
// holds it, -3 the lease key holds a value redisoutbox did not write.
type scriptCode struct {
	code  int64
	lease outbox.Lease
}

func (c scriptCode) Error() string { return "script result " + strconv.FormatInt(c.code, 10) }

// mapErr maps what went wrong with the call op to the error the Backend
// returns; ks are the keys the call passed. It is the one place a Backend
// call maps a native error:
//
//   - nil: nil.
//   - a script's result code (scriptCode): an error wrapping
//     [outbox.ErrLeaseLost] (-1) or [outbox.ErrLeaseHeld] (-2), or naming
//     the lease key to delete (-3).
//   - ctx ended, or a context error: ctx's error or err, unwrapped.
//   - the client is closed: an error wrapping [outbox.ErrClosed].
//   - an append refused by a sealed partition: a [*SealedError], wrapped.
//   - Redis refused one of ks (a key of the wrong type, a counter that
//     holds no integer): one more round trip (TYPE of each key, and GET of
//     the counters) names the key, its type and the fix, instead of a raw
//     WRONGTYPE with a script SHA. Only on that error path; never retried.
//   - anything else: err wrapped with op.
func (b *Backend) mapErr(ctx context.Context, op string, err error, ks ...string) error {
	if err == nil {
		return nil
	}
	class := classify(err)
	if class == errCode {
		var sc scriptCode
		errors.As(err, &sc)
		return b.codeErr(op, sc)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	switch class {
	case errContext:
		return err
	case errClientGone:
		return fmt.Errorf("redisoutbox: %s: the Redis client is closed: %w", op, outbox.ErrClosed)
	case errSealed:
		return fmt.Errorf("redisoutbox: %s: %w", op, &SealedError{Prefix: b.opts.Prefix, err: err})
	case errKeyType:
		if msg := b.diagnoseKeys(ctx, ks); msg != "" {
			said := err.Error()
			if i := strings.Index(said, " script: "); i >= 0 {
				said = said[:i] // the script's SHA and line say nothing more
			}
			return fmt.Errorf("redisoutbox: %s: %s (Redis said: %s)", op, msg, said)
		}
	}
	return fmt.Errorf("redisoutbox: %s: %w", op, err)
}

// codeErr is mapErr for a script's result code.
func (b *Backend) codeErr(op string, sc scriptCode) error {
	lease := sc.lease
	switch sc.code {
	case -1:
		return fmt.Errorf("redisoutbox: %s: the lease on partition %d is no longer held by %q at version %d (it expired, was taken over or was released); acquire the partition again: %w",
			op, lease.Partition, lease.Owner, lease.Version, outbox.ErrLeaseLost)
	case -2:
		return fmt.Errorf("redisoutbox: %s: partition %d is leased by another owner; retry after it expires or is released: %w",
			op, lease.Partition, outbox.ErrLeaseHeld)
	case -3:
		k := b.parts[lease.Partition].lease
		return fmt.Errorf("redisoutbox: %s: the lease key %q of partition %d holds a value that is not \"version:owner\": it was not written by redisoutbox; delete it (DEL %s) to free the partition",
			op, k, lease.Partition, k)
	}
	return fmt.Errorf("redisoutbox: %s: unexpected script result %d", op, sc.code)
}

// diagnoseKeys describes the first of ks whose type is not the one the
// outbox keeps there, or the first counter that does not hold an integer;
// "" when all look right (or the check itself failed).
func (b *Backend) diagnoseKeys(ctx context.Context, ks []string) string {
	if len(ks) == 0 {
		return ""
	}
	types := make([]*redis.StatusCmd, len(ks))
	gets := make([]*redis.StringCmd, len(ks))
	_, _ = b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, k := range ks {
			types[i] = pipe.Type(ctx, k)
			if kind, ok := keyKind(k); ok && kind.counter {
				gets[i] = pipe.Get(ctx, k)
			}
		}
		return nil
	})
	for i, k := range ks {
		kind, ok := keyKind(k)
		got, err := types[i].Result()
		if err != nil || !ok || got == "none" || got == kind.typ {
			continue
		}
		return fmt.Sprintf("the key %q is a Redis %s, but the outbox keeps %s there as a %s: something other than redisoutbox wrote it (is Options.Prefix shared with another application?); rename it out of the way (RENAME %s <new name>) or delete it (DEL %s) if it holds nothing of the outbox's, and the calls that use it work again",
			k, got, kind.holds, kind.typ, k, k)
	}
	for i, k := range ks {
		if gets[i] == nil {
			continue
		}
		v, err := gets[i].Result()
		if err != nil {
			continue
		}
		if _, perr := strconv.ParseInt(v, 10, 64); perr == nil {
			continue
		}
		kind, _ := keyKind(k)
		return fmt.Sprintf("the key %q holds %q, but the outbox keeps %s there as an integer: something other than redisoutbox wrote it; set it to an integer no lower than any value it held (SET %s <n>; for a sequence, at least the highest sequence among the partition's entries; for a lease version, higher than any lease granted)",
			k, v, kind.holds, k)
	}
	return ""
}
