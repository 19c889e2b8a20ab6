package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/backends/redis/redisinbox"
)

// redisInboxTarget is redisinbox's Store[*redisinbox.Tx] on the suite's
// Redis (logical database -redis-db), each side under a prefix of its own
// ("{ibenchN}"); an effect is an RPUSH of "seq:keyseq:key" to the list
// "{ibenchN}:effects", queued in the transaction's MULTI, against the same
// RPUSH in a MULTI/EXEC of its own (go-redis TxPipelined).
func (s *Suite) redisInboxTarget() inboxTarget[*redisinbox.Tx] {
	return inboxTarget[*redisinbox.Tx]{name: "redis", key: "redis", title: "Redis", store: "redisinbox", effect: "RPUSH", plain: "go-redis MULTI+RPUSH+EXEC",
		open: func(ctx context.Context) (*inboxSide[*redisinbox.Tx], error) {
			prefix := "{ibench" + strconv.FormatInt(instanceSeq.Add(1), 10) + "}"
			store, err := redisinbox.New(s.rdb, redisinbox.Options{Prefix: prefix})
			if err != nil {
				return nil, err
			}
			effects := store.Key("effects")
			return &inboxSide[*redisinbox.Tx]{
				store: store,
				effect: func(ctx context.Context, tx *redisinbox.Tx, rec *kgo.Record) error {
					v, err := redisEffect(rec)
					if err != nil {
						return err
					}
					return tx.Pipe().RPush(ctx, effects, v).Err()
				},
				plain: func(ctx context.Context, p *phases, recs []*kgo.Record) error {
					vals := make([]any, len(recs))
					for i, r := range recs {
						v, err := redisEffect(r)
						if err != nil {
							return err
						}
						vals[i] = v
					}
					t0 := time.Now()
					_, err := s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
						for _, v := range vals {
							pipe.RPush(ctx, effects, v)
						}
						return nil
					})
					if err == nil {
						p.add("commit", time.Since(t0))
						p.tx()
					}
					return err
				},
				counts: func(ctx context.Context, n int) (Counts, error) {
					vals, err := s.rdb.LRange(ctx, effects, 0, -1).Result()
					if err != nil {
						return Counts{}, err
					}
					rows := make([]effectRow, len(vals))
					for i, v := range vals {
						if rows[i], err = parseRedisEffect(v); err != nil {
							return Counts{}, err
						}
					}
					return effectCounts(rows, n), nil
				},
				close: func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if err := deleteKeys(ctx, s.rdb, prefix+"*"); err != nil {
						s.logf("cleanup: deleting %s*: %v", prefix, err)
					}
				},
			}, nil
		}}
}

// redisEffect is rec's effect: "seq:keyseq:key".
func redisEffect(rec *kgo.Record) (string, error) {
	seq, keySeq, err := parsePayload(rec.Value)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(seq) + ":" + strconv.Itoa(keySeq) + ":" + string(rec.Key), nil
}

func parseRedisEffect(v string) (effectRow, error) {
	parts := strings.SplitN(v, ":", 3)
	if len(parts) != 3 {
		return effectRow{}, fmt.Errorf("effect %q is not seq:keyseq:key", v)
	}
	seq, err1 := strconv.Atoi(parts[0])
	keySeq, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return effectRow{}, fmt.Errorf("effect %q is not seq:keyseq:key", v)
	}
	return effectRow{seq: seq, keySeq: keySeq, key: parts[2]}, nil
}
