package redisoutbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// keyKinds are the Redis types of the outbox's keys, by the suffix that
// partitionKeys and New give them, with what each holds.
var keyKinds = []struct {
	suffix, typ, holds string
}{
	{":entries", "hash", "the partition's entries"},
	{":pending", "zset", "the partition's pending entries"},
	{":inflight", "zset", "claims of builds before v0.2"},
	{":parked", "zset", "the partition's parked entries"},
	{":keyorder", "zset", "the partition's key order"},
	{":leasever", "string", "the partition's lease version counter"},
	{":lease", "string", "the partition's lease"},
	{":seq", "string", "the partition's append sequence counter"},
	{":keyseq", "hash", "the partition's per-key sequence numbers (Options.KeySequence)"},
	{":hold", "hash", "the partition's hold (Holder)"},
	{":sealed", "string", "the partition's seal (Sealer)"},
	{":export", "list", "ExportBatch's scratch list"},
	{":meta", "hash", "the outbox's partition count"},
	{":members", "hash", "the relays' membership records"},
}

// keyKind returns the expected type of one of the outbox's keys and what
// it holds ("" when the key is not one of them).
func keyKind(key string) (typ, holds string) {
	for _, k := range keyKinds {
		if strings.HasSuffix(key, k.suffix) {
			return k.typ, k.holds
		}
	}
	return "", ""
}

// isKeyErr reports whether err is Redis refusing a key's contents: a key
// of the wrong type (WRONGTYPE), or a counter that does not hold an
// integer (INCR's "value is not an integer").
func isKeyErr(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "WRONGTYPE") || strings.Contains(s, "not an integer")
}

// fail is wrap for an error of a call that passed the keys ks: when Redis
// refused one of them (isKeyErr), it costs one more round trip (TYPE of
// each key, and GET of the counters) to name the key, its type and the
// fix, instead of a raw WRONGTYPE with a script SHA. Only on that error
// path; never retried.
func (b *Backend) fail(ctx context.Context, op string, err error, ks ...string) error {
	if !isKeyErr(err) || ctx.Err() != nil || len(ks) == 0 {
		return b.wrap(ctx, op, err)
	}
	if msg := b.diagnoseKeys(ctx, ks); msg != "" {
		said := err.Error()
		if i := strings.Index(said, " script: "); i >= 0 {
			said = said[:i] // the script's SHA and line say nothing more
		}
		return fmt.Errorf("redisoutbox: %s: %s (Redis said: %s)", op, msg, said)
	}
	return b.wrap(ctx, op, err)
}

// diagnoseKeys describes the first of ks whose type is not the one the
// outbox keeps there, or the first counter that does not hold an integer;
// "" when all look right (or the check itself failed).
func (b *Backend) diagnoseKeys(ctx context.Context, ks []string) string {
	types := make([]*redis.StatusCmd, len(ks))
	gets := make([]*redis.StringCmd, len(ks))
	_, _ = b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, k := range ks {
			types[i] = pipe.Type(ctx, k)
			if strings.HasSuffix(k, ":seq") || strings.HasSuffix(k, ":leasever") {
				gets[i] = pipe.Get(ctx, k)
			}
		}
		return nil
	})
	for i, k := range ks {
		want, holds := keyKind(k)
		got, err := types[i].Result()
		if err != nil || want == "" || got == "none" || got == want {
			continue
		}
		return fmt.Sprintf("the key %q is a Redis %s, but the outbox keeps %s there as a %s: something other than redisoutbox wrote it (is Options.Prefix shared with another application?); rename it out of the way (RENAME %s <new name>) or delete it (DEL %s) if it holds nothing of the outbox's, and the calls that use it work again",
			k, got, holds, want, k, k)
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
		_, holds := keyKind(k)
		return fmt.Sprintf("the key %q holds %q, but the outbox keeps %s there as an integer: something other than redisoutbox wrote it; set it to an integer no lower than any value it held (SET %s <n>; for a sequence, at least the highest sequence among the partition's entries; for a lease version, higher than any lease granted)",
			k, v, holds, k)
	}
	return ""
}
