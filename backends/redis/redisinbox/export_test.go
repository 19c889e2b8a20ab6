package redisinbox

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// RunPurgeScript runs purge.lua as Store.Purge does, for the tests of its
// checks.
func RunPurgeScript(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return scriptPurge.Run(ctx, c, keys, args...)
}
