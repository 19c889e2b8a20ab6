package servers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// Ports are picked at random from [portLow, portHigh), and a cluster's bus
// ports (port+busOffset) lie in [portLow+busOffset, portHigh+busOffset):
// all below Linux's default ephemeral range (32768-60999), so outgoing
// connections never hold them.
const (
	portLow   = 11000
	portHigh  = 22000
	busOffset = 10000
)

var (
	portsMu sync.Mutex
	// portsGiven holds the ports handed out by this process, never handed
	// out twice: a stopped server keeps its port for its restart.
	portsGiven = map[int]bool{}
)

// pickPort returns a port free on 127.0.0.1 now, and with bus also
// port+busOffset free. Another process may still take it before the server
// binds it: starts retry with a new port on errAddrInUse.
func pickPort(bus bool) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 500 {
		p := portLow + rand.IntN(portHigh-portLow)
		if portsGiven[p] || !portFree(p) {
			continue
		}
		if bus && (portsGiven[p+busOffset] || !portFree(p+busOffset)) {
			continue
		}
		portsGiven[p] = true
		if bus {
			portsGiven[p+busOffset] = true
		}
		return p, nil
	}
	return 0, fmt.Errorf("servers: no free port on 127.0.0.1 in [%d, %d)", portLow, portHigh)
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// errAddrInUse marks a start that failed because its port was taken.
var errAddrInUse = errors.New("address already in use")

// startAttempts bounds the retries of a first start on errAddrInUse.
const startAttempts = 5
