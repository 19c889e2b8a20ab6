package relaycmd

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxrelay/outbox"
)

// watchHold logs whether the outbox is held (a destination being moved
// to, see docs/migration.md): a held outbox's relays fetch nothing, which
// looks like an idle relay unless it says so. It checks at once and then
// every interval, and logs a WARN when the outbox is held (at start, or
// when it becomes held) and an INFO when it is released. A store that
// cannot be held is not watched; a failed check is logged at DEBUG (the
// relay's own store errors say more).
func watchHold(ctx context.Context, store outbox.Store, log *slog.Logger, interval time.Duration) {
	h, ok := store.(outbox.Holder)
	if !ok {
		return
	}
	held := false
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		hs, err := h.HoldState(ctx)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			log.Debug("outbox relay: reading the outbox's hold failed", "err", err)
		case hs.Held && !held:
			log.Warn("outbox relay: the outbox is held: nothing is delivered until it is released (outbox move releases it when the move is done; outbox move --release rolls back)",
				"reason", hs.Reason, "since", hs.Since.UTC().Format(time.RFC3339))
		case !hs.Held && held:
			log.Info("outbox relay: the outbox was released; delivering")
		}
		if err == nil {
			held = hs.Held
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
