package redisoutbox

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// script is one embedded operation, prefixed with lib.lua unless it is
// standalone.
type script struct {
	name string
	src  string
	*redis.Script
}

func mustScript(name string) script {
	lib, err := scriptFS.ReadFile("scripts/lib.lua")
	if err != nil {
		panic(err)
	}
	return newScript(name, string(lib)+"\n")
}

// mustStandalone is mustScript for a script that defines everything it
// uses itself (append.lua, sent in full by every AppendInTx).
func mustStandalone(name string) script {
	return newScript(name, "")
}

func newScript(name, lib string) script {
	body, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	src := "-- redisoutbox " + name + ".lua\n" + stripComments(lib+string(body))
	return script{name: name, src: src, Script: redis.NewScript(src)}
}

// stripComments drops full-line comments and blank lines: AppendInTx sends
// the whole body with every EVAL (see Backend.AppendInTx), and the server
// hashes it each time. The scripts have no long strings, so a line that
// starts with "--" is always a comment.
func stripComments(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// The scripts, one per operation; see each file's header for KEYS, ARGV
// and return codes.
var (
	scriptAppend        = mustStandalone("append")
	scriptAppendKeySeq  = mustStandalone("append_keyseq")
	scriptAcquire       = mustScript("acquire")
	scriptRenew         = mustScript("renew")
	scriptRelease       = mustScript("release")
	scriptClaim         = mustScript("claim")
	scriptMarkSent      = mustScript("mark_sent")
	scriptMarkFailed    = mustScript("mark_failed")
	scriptReleaseClaims = mustScript("release_claims")
	scriptCancel        = mustScript("cancel")
	scriptRequeue       = mustScript("requeue")
	scriptStats         = mustScript("stats")
	scriptParked        = mustScript("parked")
	scriptLookup        = mustScript("lookup")
	scriptMeta          = mustScript("meta")
	scriptHeartbeat     = mustScript("heartbeat")
	scriptLeave         = mustScript("leave")
	scriptHold          = mustScript("hold")
	scriptHoldPart      = mustScript("hold_part")
	scriptImport        = mustScript("import")
	scriptExport        = mustScript("export")
	scriptRemove        = mustScript("remove_exported")
	scriptQuarantine    = mustScript("quarantine")
	scriptPause         = mustScript("pause")
	scriptMembers       = mustScript("members")
	scriptScan          = mustScript("scan")
	scriptUnpause       = mustScript("unpause")
	scriptPurgeParked   = mustScript("purge_parked")

	allScripts = []script{scriptAppend, scriptAppendKeySeq, scriptAcquire, scriptRenew, scriptRelease, scriptClaim,
		scriptMarkSent, scriptMarkFailed, scriptReleaseClaims, scriptCancel, scriptRequeue,
		scriptStats, scriptParked, scriptLookup, scriptMeta, scriptHeartbeat, scriptLeave,
		scriptHold, scriptHoldPart, scriptImport, scriptExport, scriptRemove, scriptQuarantine,
		scriptPause, scriptMembers, scriptScan, scriptUnpause, scriptPurgeParked}
)
