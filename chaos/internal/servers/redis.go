package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/chaos/internal/proc"
)

// RedisOptions configures [StartRedis]. The zero value is a Redis without
// persistence.
type RedisOptions struct {
	// AOF turns the append-only file on with appendfsync always, so a
	// write acknowledged before a kill is there after Restart. Default
	// false: appendonly no and no RDB snapshots, so a kill loses every key.
	AOF bool
}

// Redis is a private redis-server, a child of this process, in its own
// directory DIR (log DIR/redis.log), on 127.0.0.1. Methods are safe for
// concurrent use.
type Redis struct {
	bin, dir string
	port     int
	opts     RedisOptions

	mu     sync.Mutex
	p      *proc.Proc
	closed bool
}

// StartRedis starts redis-server in dir (created if missing) on a port it
// picks and returns once it answers PING with its data loaded.
func StartRedis(ctx context.Context, dir string, o RedisOptions) (*Redis, error) {
	bin, err := lookPath("redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("servers: redis: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("servers: redis: %w", err)
	}
	r := &Redis{bin: bin, dir: dir, opts: o}
	for attempt := 1; ; attempt++ {
		if r.port, err = pickPort(false); err != nil {
			return nil, err
		}
		r.p, err = startRedisServer(ctx, bin, dir, r.port, r.args())
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			return nil, err
		}
	}
}

func (r *Redis) args() []string {
	aof := "no"
	if r.opts.AOF {
		aof = "yes"
	}
	return []string{"--appendonly", aof, "--appendfsync", "always"}
}

// Addr is 127.0.0.1:PORT, the same across restarts.
func (r *Redis) Addr() string { return addr(r.port) }

// URL is redis://127.0.0.1:PORT/0.
func (r *Redis) URL() string { return "redis://" + r.Addr() + "/0" }

// Dir is the directory given to StartRedis, made absolute.
func (r *Redis) Dir() string { return r.dir }

// Kill sends SIGKILL and waits until the process is reaped. An error
// wrapping [proc.ErrExited] if it was not running.
func (r *Redis) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("servers: redis: Kill after Close")
	}
	if done, _ := r.p.Exited(); done {
		return fmt.Errorf("servers: redis %s: Kill: %w", r.Addr(), proc.ErrExited)
	}
	return r.p.Kill()
}

// Restart starts the killed (or exited) server again on the same port and
// directory and returns once it answers PING with its data loaded (with
// AOF, the file replayed). An error if it is running, or if another
// process has taken the port meanwhile.
func (r *Redis) Restart(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("servers: redis: Restart after Close")
	}
	if done, _ := r.p.Exited(); !done {
		return fmt.Errorf("servers: redis %s: Restart: still running; Kill it first", r.Addr())
	}
	p, err := startRedisServer(ctx, r.bin, r.dir, r.port, r.args())
	if err != nil {
		return err
	}
	r.p = p
	return nil
}

// Close kills the server if it is running and removes nothing: the
// directory stays for inspection and is the caller's to remove. Later
// calls return nil; other methods fail after Close.
func (r *Redis) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.p.Kill()
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// readyPoll is how often a starting server is polled.
const readyPoll = 20 * time.Millisecond

// startRedisServer starts redis-server in dir on port with the common
// arguments plus extra, and waits until it answers PING from this very
// process (its INFO process_id is the child's PID) with loading:0. The
// server's log is dir/redis.log; its standard output and error, which
// only early failures reach, go to dir/redis.out. A port taken by another
// process is errAddrInUse.
func startRedisServer(ctx context.Context, bin, dir string, port int, extra []string) (*proc.Proc, error) {
	logPath := filepath.Join(dir, "redis.log")
	var from int64
	if st, err := os.Stat(logPath); err == nil {
		from = st.Size()
	}
	args := append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--daemonize", "no",
		"--logfile", logPath,
	}, extra...)
	name := "redis-" + strconv.Itoa(port)
	p, err := proc.Start(name, filepath.Join(dir, "redis.out"), bin, args, nil)
	if err != nil {
		return nil, fmt.Errorf("servers: %w", err)
	}
	failed := func(why error) (*proc.Proc, error) {
		_ = p.Kill()
		logged := readFrom(logPath, from) + tail(p.Log, 5)
		if strings.Contains(logged, "Address already in use") {
			return nil, fmt.Errorf("servers: %s: port %d or its cluster bus port: %w (log: %s)", name, port, errAddrInUse, logPath)
		}
		return nil, fmt.Errorf("servers: %s: %w\nlog %s:\n%s", name, why, logPath, lastLines(logged, 10))
	}
	c := newClient(addr(port))
	defer c.Close()
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	var last error
	for {
		select {
		case <-p.Done():
			_, werr := p.Exited()
			return failed(fmt.Errorf("exited while starting: %v", werr))
		case <-ctx.Done():
			return failed(fmt.Errorf("not ready (last: %v): %w", last, ctx.Err()))
		case <-t.C:
		}
		info, err := c.Info(ctx, "server", "persistence").Result()
		if err != nil {
			last = err
			continue
		}
		if pid := infoField(info, "process_id"); pid != strconv.Itoa(p.PID()) {
			// Someone else's server answers on the port; ours will fail
			// to bind (or has): wait for it to exit.
			last = fmt.Errorf("port %d answered by PID %s, not %d", port, pid, p.PID())
			continue
		}
		if infoField(info, "loading") != "0" {
			last = errors.New("loading")
			continue
		}
		if err := c.Ping(ctx).Err(); err != nil {
			last = err
			continue
		}
		return p, nil
	}
}

// newClient is a client for polling and one-off commands: short timeouts,
// no retries, one connection.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:            addr,
		DialTimeout:     time.Second,
		ReadTimeout:     2 * time.Second,
		WriteTimeout:    2 * time.Second,
		PoolSize:        1,
		MaxRetries:      -1,
		DialerRetries:   1,
		Protocol:        2,
		DisableIdentity: true,
	})
}

// infoField is the value of name in INFO or CLUSTER INFO output, "" if
// absent.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
