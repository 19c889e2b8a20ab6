package redisoutbox

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// Pauses. A claim can read only the keys of its partition's slot, so a
// pause is written twice: in the outbox's pauses hash ("<Prefix>:pauses",
// the prefix's own slot: "t:"+topic or "p:"+partition -> since in ms by
// the server's clock), which keeps the Since, and in the paused hash of
// each partition it applies to ("{prefix:N}:paused": topic -> since; the
// field "" while the partition itself is paused), which claim.lua reads
// (one HGETALL per claim; nothing else while nothing is paused).
//
// Order of writes. A pause writes the outbox's record first (pause.lua,
// which keeps an existing Since), then the partitions' hashes (one
// pipeline); a resume deletes from the partitions first, then the
// record. A call cut midway (a crash, a timeout) returns its error and is
// completed by calling it again (every step is idempotent): a cut pause
// has paused some partitions and not others, a cut resume has resumed
// some, or left set-aside entries of the topic in the band (see "Pauses"
// in claim.lua) until a ResumeTopic (of any topic) moves them back; the
// record, deleted last, keeps the topic in Paused meanwhile. Paused reports the union of the record and the partitions' hashes,
// so what it reports paused is paused somewhere, whatever was cut (a
// pause racing a resume of the same topic may leave partitions paused
// without a record: Paused still reports them, and a resume clears them).

// PauseTopic pauses topic for every relay: from the next fetch on, no
// fetch of any partition returns its entries, and each of its pending
// entries holds back the later entries of its key (claim.lua). It runs
// pause.lua on the outbox's pauses hash, then writes the topic into every
// partition's paused hash (two round trips). Pausing a paused topic keeps
// its Since and writes it again everywhere (so it also completes a call
// that was cut midway). An empty topic is rejected with
// [outbox.ErrInvalidArgument]. See [outbox.Pauser].
func (b *Backend) PauseTopic(ctx context.Context, topic string) error {
	if err := b.checkTopic(ctx, "PauseTopic", topic); err != nil {
		return err
	}
	return b.pause(ctx, "PauseTopic", "t:"+topic, topic, b.allParts())
}

// ResumeTopic resumes topic: it deletes the topic from every partition's
// paused hash, moves back the entries the claims set aside while it was
// paused (unpause.lua: every set-aside entry whose topic is not paused,
// in chunks of 1000 per partition and call, the partitions in one
// pipeline per round), then deletes the topic from the outbox's pauses
// hash; its entries are fetched again from the next fetch on. Resuming a topic that
// is not paused is a no-op. An empty topic is rejected with
// [outbox.ErrInvalidArgument].
func (b *Backend) ResumeTopic(ctx context.Context, topic string) error {
	if err := b.checkTopic(ctx, "ResumeTopic", topic); err != nil {
		return err
	}
	return b.resume(ctx, "ResumeTopic", "t:"+topic, topic, b.allParts())
}

// PausePartition pauses partition p for every relay: a fetch of it returns
// nothing (after checking the lease) until it is resumed. It writes the
// outbox's pauses hash, then the partition's paused hash (field ""). A
// partition outside [0, Partitions()) is rejected with
// [outbox.ErrInvalidArgument].
func (b *Backend) PausePartition(ctx context.Context, p int) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if _, err := b.partition("PausePartition", p); err != nil {
		return err
	}
	return b.pause(ctx, "PausePartition", "p:"+strconv.Itoa(p), "", []int{p})
}

// ResumePartition resumes partition p (a no-op when it is not paused): it
// deletes the field "" of its paused hash, then its record.
func (b *Backend) ResumePartition(ctx context.Context, p int) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if _, err := b.partition("ResumePartition", p); err != nil {
		return err
	}
	return b.resume(ctx, "ResumePartition", "p:"+strconv.Itoa(p), "", []int{p})
}

// Paused reports what is paused: every topic and partition of the
// outbox's pauses hash or of a partition's paused hash (one pipeline: the
// pauses hash and each partition's paused hash, read with HGETALL), with
// the Since of the record (the earliest Since of the partitions' hashes
// when the record is missing), topics in byte order and partitions
// ascending.
func (b *Backend) Paused(ctx context.Context) (outbox.Paused, error) {
	if err := b.check(ctx); err != nil {
		return outbox.Paused{}, err
	}
	var rec *redis.MapStringStringCmd
	parts := make([]*redis.MapStringStringCmd, len(b.parts))
	_, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		rec = pipe.HGetAll(ctx, b.pauses)
		for p := range b.parts {
			parts[p] = pipe.HGetAll(ctx, b.parts[p].paused)
		}
		return nil
	})
	if err != nil {
		ks := []string{b.pauses}
		for p := range b.parts {
			ks = append(ks, b.parts[p].paused)
		}
		return outbox.Paused{}, b.mapErr(ctx, "Paused", err, ks...)
	}
	topics, partitions := map[string]int64{}, map[int]int64{}
	earliest := func(m map[string]int64, k string, ms int64) {
		if old, ok := m[k]; !ok || ms < old {
			m[k] = ms
		}
	}
	fromParts := map[string]int64{}
	for p, c := range parts {
		for field, v := range c.Val() {
			ms, _ := strconv.ParseInt(v, 10, 64)
			if field == "" {
				fromParts["p:"+strconv.Itoa(p)] = ms
				continue
			}
			earliest(fromParts, "t:"+field, ms)
		}
	}
	for field, v := range rec.Val() {
		ms, _ := strconv.ParseInt(v, 10, 64)
		fromParts[field] = ms // the record's Since wins
	}
	for field, ms := range fromParts {
		kind, name, _ := strings.Cut(field, ":")
		switch kind {
		case "t":
			topics[name] = ms
		case "p":
			if p, err := strconv.Atoi(name); err == nil && p >= 0 && p < len(b.parts) {
				partitions[p] = ms
			}
		}
	}
	var out outbox.Paused
	for t, ms := range topics {
		out.Topics = append(out.Topics, outbox.PausedTopic{Topic: t, Since: time.UnixMilli(ms)})
	}
	for p, ms := range partitions {
		out.Partitions = append(out.Partitions, outbox.PausedPartition{Partition: p, Since: time.UnixMilli(ms)})
	}
	sort.Slice(out.Topics, func(i, j int) bool { return out.Topics[i].Topic < out.Topics[j].Topic })
	sort.Slice(out.Partitions, func(i, j int) bool { return out.Partitions[i].Partition < out.Partitions[j].Partition })
	return out, nil
}

// pause writes the record field (pause.lua), then field into the paused
// hash of each partition of ps with the record's since.
func (b *Backend) pause(ctx context.Context, op, record, field string, ps []int) error {
	since, err := scriptPause.Run(ctx, b.client, []string{b.pauses}, record, "pause").Int64()
	if err != nil {
		return b.mapErr(ctx, op, err, b.pauses)
	}
	return b.eachPaused(ctx, op, ps, func(pipe redis.Pipeliner, k string) {
		pipe.HSet(ctx, k, field, since)
	})
}

// resume deletes field from the paused hash of each partition of ps,
// moves back what the claims set aside (for a topic), then deletes the
// record field.
func (b *Backend) resume(ctx context.Context, op, record, field string, ps []int) error {
	if err := b.eachPaused(ctx, op, ps, func(pipe redis.Pipeliner, k string) {
		pipe.HDel(ctx, k, field)
	}); err != nil {
		return err
	}
	if field != "" {
		if err := b.unpause(ctx, op, ps); err != nil {
			return err
		}
	}
	if err := scriptPause.Run(ctx, b.client, []string{b.pauses}, record, "resume").Err(); err != nil {
		return b.mapErr(ctx, op, err, b.pauses)
	}
	return nil
}

// eachPaused runs one command on the paused hash of each partition of ps,
// in one pipeline.
func (b *Backend) eachPaused(ctx context.Context, op string, ps []int, cmd func(pipe redis.Pipeliner, k string)) error {
	var ks []string
	_, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, p := range ps {
			ks = append(ks, b.parts[p].paused)
			cmd(pipe, b.parts[p].paused)
		}
		return nil
	})
	return b.mapErr(ctx, op, err, ks...)
}

// allParts returns 0..Partitions()-1.
func (b *Backend) allParts() []int {
	ps := make([]int, len(b.parts))
	for p := range ps {
		ps[p] = p
	}
	return ps
}

// checkTopic is check for a call that takes a topic, which must not be
// empty.
func (b *Backend) checkTopic(ctx context.Context, op, topic string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if topic == "" {
		return fmt.Errorf("redisoutbox: %s: the topic is empty; name the topic to pause or resume: %w", op, outbox.ErrInvalidArgument)
	}
	return nil
}

// unpauseChunk is how many set-aside members one unpause.lua call looks
// at.
const unpauseChunk = 1000

// unpause moves back every entry the claims of partitions ps set aside
// whose topic is no longer paused (unpause.lua, unpauseChunk members per
// call, the partitions in one pipeline per round), so they are fetched
// again from the next fetch on.
func (b *Backend) unpause(ctx context.Context, op string, ps []int) error {
	off := make([]int64, len(b.parts))
	for todo := ps; len(todo) > 0; {
		cmds, err := b.runOn(ctx, op, scriptUnpause, todo, func(p int) ([]string, []any) {
			k := &b.parts[p]
			return []string{k.pending, k.entries, k.paused, k.seq}, []any{off[p], unpauseChunk}
		})
		if err != nil {
			return err
		}
		var next []int
		for i, c := range cmds {
			p := todo[i]
			res, err := c.Slice()
			if err != nil || len(res) != 3 {
				return fmt.Errorf("redisoutbox: %s: unexpected result %v (%v) of unpause.lua on partition %d", op, c.Val(), err, p)
			}
			left, err1 := asInt64(res[1])
			n, err2 := asInt64(res[2])
			if err1 != nil || err2 != nil {
				return fmt.Errorf("redisoutbox: %s: unexpected result %v of unpause.lua on partition %d", op, res, p)
			}
			off[p] += left // the moved ones left the band
			if n == unpauseChunk {
				next = append(next, p)
			}
		}
		todo = next
	}
	return nil
}
