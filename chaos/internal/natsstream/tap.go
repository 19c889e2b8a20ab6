package natsstream

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Tap is a core NATS subscriber to the stream's subjects for the whole of
// a scenario: it sees every message published to them, those the stream
// drops as duplicates included, and counts the publishes of each entry
// ID. Core NATS delivers at most once: what is published while the tap is
// disconnected (a server killed) is not seen, so its counts are lower
// bounds.
type Tap struct {
	nc *nats.Conn

	mu    sync.Mutex
	count map[string]int
}

// StartTap subscribes to subject on the server at serverURL, reconnecting
// for as long as it runs.
func StartTap(serverURL, subject string) (*Tap, error) {
	t := &Tap{count: map[string]int{}}
	nc, err := nats.Connect(serverURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		return nil, err
	}
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		id := delivery("", 0, time.Time{}, m.Header).ID
		t.mu.Lock()
		t.count[id]++
		t.mu.Unlock()
	}); err != nil {
		nc.Close()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	t.nc = nc
	return t, nil
}

// Published reports how many publishes the tap saw and how many of them
// were re-publishes: of an entry ID it had seen published before.
func (t *Tap) Published() (publishes, republishes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.count {
		publishes += n
		republishes += n - 1
	}
	return publishes, republishes
}

// Close unsubscribes and closes the tap's connection.
func (t *Tap) Close() { t.nc.Close() }
