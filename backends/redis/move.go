package redisoutbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// importBlock is the number of append sequence numbers a partition
// reserves for imports when it is held (hold_part.lua): imports while it
// is held take them, below every sequence appended since. Sequences stay
// below 2^53 (Lua numbers), so an outbox can be held about 2^21 times.
const importBlock = 1 << 32

// SealedError is the error of an append refused because the outbox is
// sealed ([Backend.Seal]): it matches [outbox.ErrSealed]. [CheckExec]
// returns it as the Err of an [*ExecError] (Redis applied the other
// commands of the transaction); [Backend.Append] returns it wrapped.
type SealedError struct {
	// Prefix is the sealed outbox's Options.Prefix ("" when it could not
	// be told from the command).
	Prefix string
	err    error
}

func (e *SealedError) Error() string {
	name := "the outbox"
	if e.Prefix != "" {
		name = fmt.Sprintf("the outbox at prefix %q", e.Prefix)
	}
	return fmt.Sprintf("redisoutbox: %s is sealed: it was moved to another outbox, so the append was refused; configure this service to append to the destination outbox (or Unseal this one to roll the move back): %v", name, outbox.ErrSealed)
}

// Unwrap returns outbox.ErrSealed and Redis's error.
func (e *SealedError) Unwrap() []error { return []error{outbox.ErrSealed, e.err} }

func firstKey(ks []string) string {
	if len(ks) == 0 {
		return ""
	}
	return ks[0]
}

// ExportBatch runs export.lua (one round trip, fenced by the lease): up
// to limit entries of lease.Partition, pending in any state (due,
// scheduled, retrying, held back, claimed under an earlier lease) or
// parked, in the partition's append order: by sequence, which appends
// and requeues take from the partition's counter and imports from the
// block reserved when the outbox was held (so imported entries come
// before the entries appended since the hold). It changes no entry (the
// script sorts into a scratch key it deletes). DueAt is the entry's next
// attempt time; for an entry held back behind a failing entry of its key
// and re-scored to that entry's retry time, it is the entry's own due
// time (its position; its created-at for an entry imported due, whose
// position is 0); for a deferred entry, its deferral time. Parked entries
// have a zero DueAt. Each entry comes with its attempt history and, when
// pending, its Deferred flag (the history hash's field), which
// [Backend.Import] carries over.
//
// A stored value that does not decode is exported as a parked entry with
// the key and topic that could be read, the reason as LastError and the
// raw value as Payload, as FetchBatch would have quarantined it; a
// quarantined value (parked by FetchBatch) is exported parked as stored.
//
// Cost: O(pending + parked entries of the partition) per call, most of it
// in Redis's SORT (docs/redis.md, "Moving an outbox"). Errors wrap
// [outbox.ErrLeaseLost] or [outbox.ErrInvalidArgument] (limit not
// positive, partition out of range). After Close it returns
// [outbox.ErrClosed].
func (b *Backend) ExportBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	const op = "ExportBatch"
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if err := outbox.CheckFetch(len(b.parts), lease, limit); err != nil {
		return nil, argErr(op, err)
	}
	k := &b.parts[lease.Partition]
	ks := []string{k.lease, k.pending, k.entries, k.parked, k.export, k.history}
	res, err := scriptExport.Run(ctx, b.client, ks, token(lease), limit).Result()
	if err != nil {
		return nil, b.mapErr(ctx, op, err, ks...)
	}
	if code, ok := res.(int64); ok {
		return nil, b.mapErr(ctx, op, scriptCode{code, lease})
	}
	flat, ok := res.([]any)
	if !ok || len(flat)%5 != 0 {
		return nil, fmt.Errorf("redisoutbox: %s: unexpected script result %v", op, res)
	}
	out := make([]outbox.EntryInfo, 0, len(flat)/5)
	for i := 0; i < len(flat); i += 5 {
		id, _ := flat[i].(string)
		raw, _ := flat[i+1].(string)
		state, _ := flat[i+2].(int64)
		score, _ := flat[i+3].(string)
		hist, _ := flat[i+4].(string)
		out = append(out, exportedInfo(id, lease.Partition, []byte(raw), state == 2, score, hist))
	}
	return out, nil
}

// exportedInfo decodes one entry of export.lua's result (hist: its
// history value, "" for none).
func exportedInfo(id string, partition int, raw []byte, parked bool, score, hist string) outbox.EntryInfo {
	history, deferred := decodeHistory(hist)
	e, err := decodeEntry(id, partition, raw)
	if err != nil {
		// What FetchBatch would have quarantined: parked, the raw value as
		// payload, the reason as last error.
		e.Payload = append([]byte(nil), raw...)
		e.LastError = "redisoutbox: corrupt stored entry, parked by ExportBatch: " + strings.TrimPrefix(err.Error(), errCorrupt.Error()+": ") + "; the payload holds the raw stored value"
		e.Attempts = 1
		return outbox.EntryInfo{Entry: e, Parked: true, History: history}
	}
	info := outbox.EntryInfo{Entry: e, Parked: parked || raw[0] == encodingQuarantined, History: history}
	if info.Parked {
		return info
	}
	info.Deferred = deferred
	ms, err := strconv.ParseInt(score, 10, 64)
	if err != nil {
		f, _ := strconv.ParseFloat(score, 64)
		ms = int64(f)
	}
	if pos, ok := position(raw); ok && e.Attempts == 0 && !deferred {
		switch {
		case pos > 0 && pos < ms:
			ms = pos // held back and re-scored: due since its position
		case pos == 0 && ms > time.Now().UnixMilli() && !e.CreatedAt.IsZero():
			// Imported, due when imported (position 0), held back and
			// re-scored: its due time is gone; it is due since its
			// created-at at the latest, which keeps it due (ahead) when
			// it is imported again.
			ms = e.CreatedAt.UnixMilli()
		}
	}
	info.DueAt = time.UnixMilli(ms)
	return info
}

// RemoveExported runs remove_exported.lua (one round trip, fenced by the
// lease): the entries are deleted from lease.Partition whatever their
// state, never archived. Unknown IDs, IDs already removed and IDs of
// other partitions are ignored. Entries of their keys that FetchBatch
// re-scored behind a removed failing entry keep that score (late, never
// early); a relay of this outbox normally never sees them, since the
// whole partition is exported. Empty ids: nil, no round trip.
func (b *Backend) RemoveExported(ctx context.Context, lease outbox.Lease, ids []string) error {
	const op = "RemoveExported"
	if err := b.check(ctx); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	k, err := b.partition(op, lease.Partition)
	if err != nil {
		return err
	}
	return b.fenced(ctx, op, scriptRemove, lease,
		[]string{k.lease, k.pending, k.entries, k.keyorder, k.parked, k.history, k.parkedat}, idArgs(lease, ids))
}

// checkImported checks what Import stores of each entry.
func checkImported(entries []outbox.EntryInfo) error {
	for i, e := range entries {
		var rule string
		switch {
		case e.ID == "":
			rule = "its ID is empty"
		case len(e.ID) > outbox.MaxIDLen:
			rule = fmt.Sprintf("its ID is %d bytes, more than MaxIDLen (%d)", len(e.ID), outbox.MaxIDLen)
		case !utf8.ValidString(e.ID):
			rule = "its ID is not valid UTF-8"
		case e.Topic == "" && !e.Parked:
			rule = "its topic is empty and it is not parked"
		case len(e.Topic) > outbox.MaxTopicLen:
			rule = fmt.Sprintf("its topic is %d bytes, more than MaxTopicLen (%d)", len(e.Topic), outbox.MaxTopicLen)
		case len(e.Key) > outbox.MaxKeyLen:
			rule = fmt.Sprintf("its key is %d bytes, more than MaxKeyLen (%d)", len(e.Key), outbox.MaxKeyLen)
		default:
			continue
		}
		return fmt.Errorf("redisoutbox: Import: entry %d (ID %.64q) cannot be imported: %s; nothing of the call was added: %w", i, e.ID, rule, outbox.ErrInvalidEntry)
	}
	return nil
}

// encodeImported is encodeEntry with the script-managed header an import
// keeps: created-at, attempts and last error (sequence and position are
// zero: import.lua sets them).
func encodeImported(e *outbox.EntryInfo) []byte {
	plain := e.Entry
	plain.LastError = ""
	body := encodeEntry(&plain)
	out := make([]byte, 0, len(body)+len(e.LastError))
	out = append(out, body[:9]...)
	var created int64
	if !e.CreatedAt.IsZero() {
		created = e.CreatedAt.UnixMicro()
	}
	out = appendUint64(out, uint64(created))
	out = appendUint64(out, 0) // position
	out = appendUint32(out, uint32(e.Attempts))
	out = appendString(out, e.LastError)
	return append(out, body[fixedHeaderLen:]...)
}

func appendUint64(b []byte, v uint64) []byte {
	return append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendUint32(b []byte, v uint32) []byte {
	return append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// importArgs is import.lua's quintuple for e: ID, kind, due time, value
// and history.
func importArgs(e *outbox.EntryInfo) []any {
	kind, due := "u", ""
	switch {
	case e.Parked:
		kind = "p"
	case e.Attempts > 0 || e.Deferred:
		kind = "a" // marked: it holds back its key
	case !e.NotBefore.IsZero():
		kind = "n"
	}
	if !e.Parked && !e.DueAt.IsZero() {
		due = strconv.FormatInt(ceilMillis(e.DueAt), 10)
	}
	return []any{e.ID, kind, due, encodeImported(e), encodeHistory(e.History, e.Deferred && !e.Parked)}
}

// Import adds entries exported from another outbox (see
// [outbox.Importer]): each goes to PartitionOf(Key, Partitions()) here,
// with its ID, topic, key, payload, headers, NotBefore, created-at,
// attempts, last error, attempt history (the last
// [outbox.MaxAttemptHistory]), deferral (a deferred pending entry is
// imported as an attempted one is, so it holds back its key), due time
// and parked state. It returns how many it
// added; an ID the outbox holds (appended or imported) is skipped.
//
// Entries are checked first (errors wrap [outbox.ErrInvalidEntry], and
// nothing is added); then import.lua runs once per partition touched, all
// in one pipeline (one round trip per node). Each partition's entries are
// added atomically, but a call spanning partitions is not atomic across
// them: when it fails part way, the partitions whose script ran keep
// their entries (the count returned with the error includes them), and
// calling Import again with the same entries (it is idempotent) adds the
// rest.
//
// Placement (import.lua): every imported entry except a scheduled one
// (never attempted, due later) takes position 0 in its key's order, so it
// comes before every entry appended to its key, and the imported entries
// of a key come in the order imported; a due entry's due time is lowered
// to at most 1 ms before the hold's Since (or the store's now when the
// outbox is not held); entries imported while the outbox is held take
// sequence numbers below every entry appended since the hold. See
// docs/redis.md, "Moving an outbox". It does not apply Options.Limits and
// does not number keys. The entries are not retained. No entries: 0, nil
// and no round trip. After Close it returns [outbox.ErrClosed].
func (b *Backend) Import(ctx context.Context, entries []outbox.EntryInfo) (int, error) {
	const op = "Import"
	if err := b.check(ctx); err != nil {
		return 0, err
	}
	if len(entries) == 0 {
		return 0, nil
	}
	if err := checkImported(entries); err != nil {
		return 0, err
	}
	byPart := make(map[int][]any)
	var order []int
	for i := range entries {
		e := &entries[i]
		p := outbox.PartitionOf(e.Key, len(b.parts))
		if _, ok := byPart[p]; !ok {
			order = append(order, p)
		}
		byPart[p] = append(byPart[p], importArgs(e)...)
	}
	cmds := make([]*redis.Cmd, len(order))
	kss := make([][]string, len(order))
	run := func(eval bool) error {
		_, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, p := range order {
				if cmds[i] != nil && !isNoScript(cmds[i].Err()) {
					continue
				}
				k := &b.parts[p]
				kss[i] = []string{k.entries, k.pending, k.seq, k.keyorder, k.parked, k.hold, k.history, k.parkedat}
				if eval {
					cmds[i] = pipe.Eval(ctx, scriptImport.src, kss[i], byPart[p]...)
				} else {
					cmds[i] = pipe.EvalSha(ctx, scriptImport.Hash(), kss[i], byPart[p]...)
				}
			}
			return nil
		})
		return err
	}
	err := run(false)
	if err != nil {
		retry := false
		for _, c := range cmds {
			retry = retry || isNoScript(c.Err())
		}
		if retry {
			err = run(true)
		}
	}
	// Every partition whose script ran counts, also when another's failed:
	// the count is what the outbox holds now that it did not before.
	added, failed := 0, -1
	for i, c := range cmds {
		if c.Err() != nil {
			if failed < 0 {
				failed = i
			}
			continue
		}
		n, _ := c.Int64()
		added += int(n)
	}
	if failed >= 0 {
		return added, b.mapErr(ctx, op, cmds[failed].Err(), kss[failed]...)
	}
	if err != nil {
		return added, b.mapErr(ctx, op, err)
	}
	return added, nil
}

// Hold holds the outbox (see [outbox.Holder]): hold.lua records the
// reason and the first Since (server TIME, ms) in the meta key, then
// hold_part.lua writes each partition's hold hash with that Since, all
// partitions in one pipeline (two round trips in all, the second one per
// node). While a partition's hash exists, FetchBatch and FindPendingBatch
// return nothing (one EXISTS in claim.lua); appends, leases, stats and
// operator calls work as usual. A held partition also reserves a block of
// sequence numbers for imports (see [Backend.Import]).
//
// Holding a held outbox keeps its Since and its partitions' blocks and
// replaces the reason. Not atomic across partitions: when Hold fails part
// way, HoldState reports the outbox held (it is, in part); call Hold
// again. Entries fetched before Hold returned may still be delivered.
func (b *Backend) Hold(ctx context.Context, reason string) error {
	const op = "Hold"
	if err := b.check(ctx); err != nil {
		return err
	}
	since, err := scriptHold.Run(ctx, b.client, []string{b.meta}, reason).Int64()
	if err != nil {
		return b.mapErr(ctx, op, err, b.meta)
	}
	_, err = b.runEach(ctx, op, scriptHoldPart, func(k *keys) ([]string, []any) {
		return []string{k.hold, k.seq}, []any{since, importBlock}
	})
	return err
}

// Unhold releases the outbox: it deletes every partition's hold hash (one
// pipeline), then the meta key's record. Relays deliver at their next
// fetch. Unholding an outbox that is not held is a no-op. When it fails
// part way, HoldState still reports the outbox held; call it again.
func (b *Backend) Unhold(ctx context.Context) error {
	const op = "Unhold"
	if err := b.check(ctx); err != nil {
		return err
	}
	if _, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for p := range b.parts {
			pipe.Del(ctx, b.parts[p].hold)
		}
		return nil
	}); err != nil {
		return b.mapErr(ctx, op, err)
	}
	return b.mapErr(ctx, op, b.client.HDel(ctx, b.meta, "hold-since", "hold-reason").Err())
}

// HoldState reports the hold: the meta key's reason and Since (by the
// clock of the meta key's server) and every partition's hold hash, read
// in one pipeline. The outbox is reported held when the meta record or
// any partition's hash exists (a Hold or Unhold that failed part way
// leaves some of them: the outbox is then held in part, and reported
// held, so it is never stranded unseen); Since is then the record's, or
// the earliest partition's when the record is gone.
func (b *Backend) HoldState(ctx context.Context) (outbox.HoldState, error) {
	const op = "HoldState"
	if err := b.check(ctx); err != nil {
		return outbox.HoldState{}, err
	}
	var meta *redis.SliceCmd
	parts := make([]*redis.StringCmd, len(b.parts))
	_, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		meta = pipe.HMGet(ctx, b.meta, "hold-since", "hold-reason")
		for p := range b.parts {
			parts[p] = pipe.HGet(ctx, b.parts[p].hold, "since")
		}
		return nil
	})
	if err != nil {
		if merr := meta.Err(); merr != nil {
			return outbox.HoldState{}, b.mapErr(ctx, op, merr, b.meta)
		}
		for p, c := range parts {
			if cerr := c.Err(); cerr != nil && cerr != redis.Nil {
				return outbox.HoldState{}, b.mapErr(ctx, op, cerr, b.parts[p].hold)
			}
		}
	}
	var hs outbox.HoldState
	var since int64 = -1
	v := meta.Val()
	recorded := false
	if len(v) == 2 {
		if s, ok := v[0].(string); ok {
			recorded = true
			since, _ = strconv.ParseInt(s, 10, 64)
		}
		hs.Reason, _ = v[1].(string)
	}
	hs.Held = recorded
	for _, c := range parts {
		s, err := c.Result()
		if err != nil {
			continue
		}
		hs.Held = true
		if ms, err := strconv.ParseInt(s, 10, 64); err == nil && !recorded && (since < 0 || ms < since) {
			since = ms
		}
	}
	if hs.Held && since >= 0 {
		hs.Since = time.UnixMilli(since)
	}
	return hs, nil
}

// Seal seals the outbox (see [outbox.Sealer]): it sets every partition's
// sealed flag ({prefix:p}:sealed), in one pipeline (one round trip per
// node). The append scripts check the flag when they run, at the
// caller's EXEC, before they write anything: an EXEC that runs after Seal
// returned fails its append with a [*SealedError] (matching
// [outbox.ErrSealed], through [CheckExec]); one that ran before has
// committed. Redis does not roll back, so the other commands of a refused
// transaction (the business write) are applied: CheckExec's
// [*ExecError] says so. Sealing a sealed outbox is a no-op. Entries
// already in the outbox stay, and relays, exports, requeues and operator
// calls work on them.
func (b *Backend) Seal(ctx context.Context) error {
	return b.setSealed(ctx, "Seal", true)
}

// Unseal deletes every partition's sealed flag: appends are accepted
// again. Unsealing an outbox that is not sealed is a no-op.
func (b *Backend) Unseal(ctx context.Context) error {
	return b.setSealed(ctx, "Unseal", false)
}

func (b *Backend) setSealed(ctx context.Context, op string, sealed bool) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	set := func(pipe redis.Pipeliner) error {
		for p := range b.parts {
			if sealed {
				pipe.Set(ctx, b.parts[p].sealed, "1", 0)
			} else {
				pipe.Del(ctx, b.parts[p].sealed)
			}
		}
		return nil
	}
	var err error
	if _, cluster := b.client.(*redis.ClusterClient); cluster {
		// The partitions' flags live in different slots: one MULTI
		// cannot hold them, so a transaction appending to several
		// partitions may meet some flags set and others not.
		_, err = b.client.Pipelined(ctx, set)
	} else {
		// One server: every flag in one MULTI/EXEC, so a transaction
		// appending to several partitions runs wholly before the seal
		// or wholly after it.
		_, err = b.client.TxPipelined(ctx, set)
	}
	return b.mapErr(ctx, op, err)
}

// Sealed reports whether the outbox is sealed: every partition's flag is
// set (one pipeline of EXISTS). When only some are (a Seal or Unseal that
// failed part way), it returns false with an error saying so: call Seal or
// Unseal again.
func (b *Backend) Sealed(ctx context.Context) (bool, error) {
	const op = "Sealed"
	if err := b.check(ctx); err != nil {
		return false, err
	}
	cmds := make([]*redis.IntCmd, len(b.parts))
	if _, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for p := range b.parts {
			cmds[p] = pipe.Exists(ctx, b.parts[p].sealed)
		}
		return nil
	}); err != nil {
		return false, b.mapErr(ctx, op, err)
	}
	var sealed []int
	for p, c := range cmds {
		if c.Val() == 1 {
			sealed = append(sealed, p)
		}
	}
	switch len(sealed) {
	case 0:
		return false, nil
	case len(b.parts):
		return true, nil
	}
	return false, fmt.Errorf("redisoutbox: Sealed: the outbox at prefix %q is sealed in part (partitions %v of %d refuse appends): a Seal or Unseal failed part way; call Seal or Unseal again", b.opts.Prefix, sealed, len(b.parts))
}
