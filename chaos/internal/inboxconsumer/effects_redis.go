package inboxconsumer

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/backends/redis/redisinbox"
	"github.com/outboxrelay/outbox/chaos/internal/exactlyonce"
)

// In Redis the inbox's keys and the effects live under the prefix the
// store URL's "prefix" query parameter gives (redis://HOST:PORT/DB?
// prefix={tag}): the effects are a list, Key("effects"), one element
// "ID\tKEY\tSEQ\tPID" per effect, pushed (RPUSH) in the transaction's
// MULTI, so the list's order is the EXECs' order: its index + 1 is n.

func isRedis(store string) bool {
	return strings.HasPrefix(store, "redis://")
}

// openRedis opens the Redis a redis:// URL names and returns the key
// prefix of its "prefix" parameter (removed from the URL given to
// go-redis).
func openRedis(store string) (*redis.Client, string, error) {
	u, err := url.Parse(store)
	if err != nil {
		return nil, "", errors.New("inboxconsumer: -store is not a URL; give redis://HOST:PORT/DB?prefix={tag}")
	}
	q := u.Query()
	prefix := q.Get("prefix")
	if prefix == "" {
		return nil, "", fmt.Errorf("inboxconsumer: -store %s has no prefix parameter; add ?prefix={tag}", u.Redacted())
	}
	q.Del("prefix")
	u.RawQuery = q.Encode()
	opt, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, "", fmt.Errorf("inboxconsumer: -store %s: %v", u.Redacted(), err)
	}
	return redis.NewClient(opt), prefix, nil
}

func redisEffectsKey(prefix string) string { return prefix + ":effects" }

// insertEffectRedis queues the consumers' effect in the transaction.
func insertEffectRedis(ctx context.Context, tx *redisinbox.Tx, prefix, id, key string, seq int64, pid int) error {
	return tx.Pipe().RPush(ctx, redisEffectsKey(prefix), fmt.Sprintf("%s\t%s\t%d\t%d", id, key, seq, pid)).Err()
}

func readEffectsRedis(ctx context.Context, store string) ([]exactlyonce.Effect, error) {
	c, prefix, err := openRedis(store)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	vals, err := c.LRange(ctx, redisEffectsKey(prefix), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("inboxconsumer: reading the effects: %w", err)
	}
	out := make([]exactlyonce.Effect, len(vals))
	for i, v := range vals {
		f := strings.Split(v, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("inboxconsumer: effect %d is %q, not ID\\tKEY\\tSEQ\\tPID", i+1, v)
		}
		seq, err1 := strconv.ParseInt(f[2], 10, 64)
		pid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("inboxconsumer: effect %d is %q: its seq or pid is not a number", i+1, v)
		}
		out[i] = exactlyonce.Effect{N: int64(i + 1), ID: f[0], Key: f[1], Seq: seq, PID: pid}
	}
	return out, nil
}

func countEffectsRedis(ctx context.Context, store string) (applied, rows int, err error) {
	effects, err := readEffectsRedis(ctx, store)
	if err != nil {
		return 0, 0, err
	}
	ids := map[string]bool{}
	for _, f := range effects {
		ids[f.ID] = true
	}
	return len(ids), len(effects), nil
}
