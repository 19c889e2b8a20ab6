package redisoutbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ExecError is the error [CheckExec] returns when EXEC ran the caller's
// transaction but at least one queued command failed at run time (for
// example WRONGTYPE in the caller's own business command). Redis does not
// roll back: every other queued command, the outbox's appends included,
// was applied.
type ExecError struct {
	// Index is the position in the EXEC's commands of the first command
	// that failed, counting from 0 (MULTI and EXEC are not counted).
	Index int
	// Name is that command's name, such as "hset".
	Name string
	// Err is that command's error as Redis returned it.
	Err error
	// Appended lists the entry IDs carried by the outbox appends of the
	// same EXEC, which were applied: they will be published. An ID that
	// was already in the outbox before this EXEC is listed too (the append
	// left that entry as it was).
	Appended []string

	// appendKeys are the keys of the failed command when it is an outbox
	// append that Redis refused a key of (WRONGTYPE).
	appendKeys []string
}

func (e *ExecError) Error() string {
	msg := fmt.Sprintf("redisoutbox: EXEC ran the transaction but command %d (%s) failed: %v; Redis applied every other queued command", e.Index, e.Name, e.Err)
	if len(e.appendKeys) > 0 {
		msg += fmt.Sprintf("; that command is an outbox append and one of its keys (%s) is of the wrong type: Backend.Append of an entry with the same key names it and the fix", strings.Join(e.appendKeys, ", "))
	}
	if len(e.Appended) == 0 {
		return msg + "; it held no outbox append"
	}
	return msg + fmt.Sprintf(", so the outbox entries %s WERE appended and will be published: undo or complete the business write, or cancel the entries with Backend.Cancel (a relay may already have published them)",
		strings.Join(e.Appended, ", "))
}

// Unwrap returns the failed command's error.
func (e *ExecError) Unwrap() error { return e.Err }

// CheckExec checks the result of a transaction that holds AppendInTx,
// as returned by client.TxPipelined or pipe.Exec:
//
//	err := redisoutbox.CheckExec(client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
//		pipe.HSet(ctx, key, "state", "paid")
//		return ob.AppendInTx(ctx, pipe, entry)
//	}))
//
// go-redis returns the first failed command's error, which reads as if the
// transaction failed; but when a command fails at run time inside EXEC,
// Redis still runs and applies every other queued command, the outbox's
// appends included. CheckExec tells the cases apart:
//
//   - err is nil: nil.
//   - EXEC ran and a queued command failed: an [*ExecError] naming the
//     first failed command and the IDs of the entries that were appended.
//     When that command is an append refused because the outbox is sealed
//     (see [Backend.Seal]), its Err is a [*SealedError] and the error
//     matches [outbox.ErrSealed]; the transaction's other commands (the
//     business write) were applied all the same.
//   - nothing ran (a WATCH conflict, redis.TxFailedErr; EXECABORT after a
//     command was refused when queued; a CROSSSLOT refusal): err, wrapped
//     with a note that nothing was applied.
//   - any other error (the connection failed): err, wrapped with a note
//     that the outcome is unknown; look the entries up with
//     Backend.Lookup.
//
// A failed read such as GET of a missing key (redis.Nil) is not a failure.
// CheckExec does not keep cmds.
func CheckExec(cmds []redis.Cmder, err error) error {
	if err == nil {
		return nil
	}
	aborted := classify(err) == errAborted
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil && classify(cerr) == errAborted {
			aborted = true // go-redis may return the refused command's error instead
		}
	}
	if aborted {
		return fmt.Errorf("redisoutbox: the transaction did not run, nothing of it was applied (no outbox entry was appended): %w", err)
	}
	var ee *ExecError
	for i, c := range cmds {
		cerr := c.Err()
		if cerr == nil || cerr == redis.Nil {
			continue
		}
		var rerr redis.Error
		if !errors.As(cerr, &rerr) {
			return fmt.Errorf("redisoutbox: the outcome of the transaction is unknown (EXEC may or may not have run): %w; look its entries up with Backend.Lookup", err)
		}
		if ee == nil {
			ee = &ExecError{Index: i, Name: c.Name(), Err: cerr}
			switch classify(cerr) {
			case errSealed:
				ee.Err = &SealedError{Prefix: prefixOfKey(firstKey(appendKeys(c))), err: cerr}
			case errKeyType:
				ee.appendKeys = appendKeys(c)
			}
		}
	}
	if ee == nil {
		if err == redis.Nil {
			return nil // go-redis reports a read of a missing key as the first error
		}
		return fmt.Errorf("redisoutbox: the outcome of the transaction is unknown (EXEC may or may not have run): %w; look its entries up with Backend.Lookup", err)
	}
	for _, c := range cmds {
		if c.Err() == nil {
			ee.Appended = append(ee.Appended, appendedIDs(c)...)
		}
	}
	return ee
}

// appendKeys returns the keys of an append queued by AppendInTx, or nil
// for any other command.
func appendKeys(c redis.Cmder) []string {
	args := c.Args()
	if appendStride(args) == 0 {
		return nil
	}
	nkeys, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || len(args) < 3+nkeys {
		return nil
	}
	ks := make([]string, nkeys)
	for i := range ks {
		ks[i] = fmt.Sprint(args[3+i])
	}
	return ks
}

// appendStride returns the number of arguments per entry of an append
// queued by AppendInTx (EVAL of append.lua: 3, of append_keyseq.lua: 4),
// or 0 for any other command.
func appendStride(args []any) int {
	if len(args) < 3 || !strings.EqualFold(fmt.Sprint(args[0]), "eval") {
		return 0
	}
	switch args[1] {
	case scriptAppend.src:
		return 3
	case scriptAppendKeySeq.src:
		return 4
	}
	return 0
}

// appendedIDs returns the entry IDs of an append queued by AppendInTx
// (EVAL of append.lua: keys, channel, partition, then id, due, blob per
// entry; of append_keyseq.lua the same with an offset per entry), or nil
// for any other command.
func appendedIDs(c redis.Cmder) []string {
	args := c.Args()
	stride := appendStride(args)
	if stride == 0 {
		return nil
	}
	nkeys, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil {
		return nil
	}
	var ids []string
	for i := 3 + nkeys + 2; i < len(args); i += stride {
		ids = append(ids, fmt.Sprint(args[i]))
	}
	return ids
}
