package redisinbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// This file is where native errors (go-redis's and Redis's) become the
// store's: wrap maps the error of one call, execErr the result of a
// transaction's EXEC.

// ExecError is the error a transaction's commit returns when EXEC ran but
// at least one queued command failed at run time (for example WRONGTYPE in
// the handler's own effect). Redis does not roll back: every other queued
// command was applied, the inbox's records of the transaction's messages
// included, so those messages count as applied and a redelivery is
// skipped as a duplicate. The failed effect must be repaired by hand.
// Retryable is false for it.
type ExecError struct {
	// Index is the position of the first failed command among the
	// transaction's queued commands (the inbox's and the handler's, in the
	// order they were queued; MULTI and EXEC are not counted).
	Index int
	// Name is that command's name, such as "hset".
	Name string
	// Err is that command's error as Redis returned it.
	Err error
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("redisinbox: EXEC ran the transaction but command %d (%s) failed: %v; Redis does not roll back, so every other queued command was applied, the inbox's records included: the messages count as applied and will not be handled again; repair the effect by hand, and queue only commands that cannot fail at run time (a command on a key of the wrong type can)",
		e.Index, e.Name, e.Err)
}

// Unwrap returns the failed command's error.
func (e *ExecError) Unwrap() error { return e.Err }

// errSlotMoved marks the error of a transaction refused because the
// inbox's Cluster slot moved to another master; Retryable is true for it.
var errSlotMoved = errors.New("redisinbox: the inbox's Redis Cluster slot moved to another master")

// movedHere reports whether err is a MOVED or ASK redirection of the
// inbox's own slot ("MOVED 3999 127.0.0.1:7001": a resharding, or a
// failover go-redis's slot map has not seen), and then has go-redis reload
// its slot map (in the background) for the next attempt. A redirection of
// another slot is a key outside the inbox's slot: not this.
func (s *Store) movedHere(err error) bool {
	if s.cluster == nil || err == nil {
		return false
	}
	f := strings.Fields(err.Error())
	if len(f) < 3 || (f[0] != "MOVED" && f[0] != "ASK") || f[1] != strconv.Itoa(s.slot) {
		return false
	}
	s.cluster.ReloadState(context.Background())
	return true
}

// wrap is the package's wrap, plus a redirection of the inbox's slot
// (see movedHere), which becomes a retryable error.
func (s *Store) wrap(ctx context.Context, op string, err error) error {
	if s.movedHere(err) {
		return fmt.Errorf("redisinbox: %s: %w (%w); nothing was applied: run the transaction again (inbox.Inbox does) once go-redis has reloaded its slot map", op, errSlotMoved, err)
	}
	return wrap(ctx, op, err)
}

// isContext reports whether err is a context error.
func isContext(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// wrap maps err, returned by the Redis calls of op: nil stays nil, a
// context error passes through unwrapped (ctx's own when it ended), a
// closed client says so, anything else is wrapped with op.
func wrap(ctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case isContext(err):
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		return err
	case errors.Is(err, redis.ErrClosed):
		return fmt.Errorf("redisinbox: %s: the Redis client is closed; use an open client: %w", op, err)
	}
	return fmt.Errorf("redisinbox: %s: %w", op, err)
}

// execErr maps the result of a transaction's EXEC (cmds and err as
// pipe.Exec returned them):
//
//   - nil, or only a read of a missing key (redis.Nil): nil.
//   - a WATCHed key changed (redis.TxFailedErr): an error wrapping it, for
//     which Retryable is true.
//   - the inbox's own slot moved (MOVED or ASK of it, when queued): nothing
//     ran; an error for which Retryable is true (see movedHere).
//   - Redis refused a command when it was queued (EXECABORT; CROSSSLOT or
//     MOVED for a key outside the inbox's slot): nothing ran; an error
//     that says so, naming the slot rule when it is the cause.
//   - a command failed at run time: an [*ExecError].
//   - anything else (the connection failed): the outcome is unknown.
func (s *Store) execErr(ctx context.Context, cmds []redis.Cmder, err error) error {
	if err == nil {
		return nil
	}
	if isContext(err) {
		return wrap(ctx, "commit", err)
	}
	for _, c := range cmds {
		if s.movedHere(c.Err()) {
			return s.wrap(ctx, "commit", c.Err())
		}
	}
	if errors.Is(err, redis.TxFailedErr) {
		return fmt.Errorf("redisinbox: commit: a WATCHed key changed before EXEC (the same message, or a message of the same key, was handled concurrently, or a key the handler watched was written), so nothing of the transaction was applied; run it again from the start (inbox.Inbox does): %w", err)
	}
	aborted := redis.IsExecAbortError(err)
	slot := false
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil {
			s := cerr.Error()
			slot = slot || strings.HasPrefix(s, "CROSSSLOT") || strings.HasPrefix(s, "MOVED") || strings.HasPrefix(s, "ASK")
			aborted = aborted || redis.IsExecAbortError(cerr)
		}
	}
	if aborted || slot {
		if slot {
			return fmt.Errorf("redisinbox: commit: Redis refused a queued command for a key outside the inbox's Cluster slot, so nothing of the transaction was applied; give every key the handler queues or watches the inbox's hash tag %s (build it with Store.Key): %w", s.k.tag, err)
		}
		return fmt.Errorf("redisinbox: commit: Redis refused a queued command (EXECABORT), so nothing of the transaction was applied; fix the command the error names: %w", err)
	}
	for i, c := range cmds {
		cerr := c.Err()
		if cerr == nil || cerr == redis.Nil {
			continue
		}
		var rerr redis.Error
		if !errors.As(cerr, &rerr) {
			break
		}
		return &ExecError{Index: i, Name: c.Name(), Err: cerr}
	}
	if err == redis.Nil {
		return nil // go-redis reports a read of a missing key as the first error
	}
	return fmt.Errorf("redisinbox: commit: the outcome of the transaction is unknown (EXEC may or may not have run); do not acknowledge the messages: a redelivery is applied if EXEC did not run and skipped as a duplicate if it did: %w", err)
}
