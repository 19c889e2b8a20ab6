package redisinbox

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// purgeSrc is Store.Purge's script; its header documents KEYS, ARGV and
// the reply. It is run by SHA (redis.Script falls back to EVAL after a
// NOSCRIPT, as after SCRIPT FLUSH or a failover).
//
//go:embed scripts/purge.lua
var purgeSrc string

var scriptPurge = redis.NewScript(purgeSrc)
