package redisoutbox

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// startPrivateRedis starts a redis-server of the test's own on a free port
// of 127.0.0.1 with its data in a temporary directory, and kills exactly
// that process when the test ends. Extra arguments are passed to the server.
func startPrivateRedis(t *testing.T, args ...string) *redis.Client {
	t.Helper()
	c, _ := startRestartableRedis(t, args...)
	return c
}

// startRestartableRedis is startPrivateRedis that also returns a function
// that kills the server with SIGKILL (a crash) and starts it again on the
// same port and directory.
func startRestartableRedis(t *testing.T, args ...string) (*redis.Client, func()) {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (%v); install redis-server (apt-get install redis-server)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	dir := t.TempDir()
	cmdArgs := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir, "--save", ""}, args...)
	var cmd *exec.Cmd
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { _ = c.Close() })
	start := func() {
		cmd = exec.Command(path, cmdArgs...)
		require.NoError(t, cmd.Start())
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := c.Ping(ctx).Err()
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("private redis-server on port %d did not answer: %v", port, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	kill := func() {
		_ = cmd.Process.Kill() // only the process this test started
		_ = cmd.Wait()
	}
	start()
	t.Cleanup(kill)
	return c, func() { kill(); start() }
}
