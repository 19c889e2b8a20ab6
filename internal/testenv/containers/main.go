// Command containers starts a PostgreSQL or Redis container for the tests
// with testcontainers-go, prints its URL on one line and keeps it until its
// standard input ends, then removes it. internal/testenv runs it (go run)
// when a test binary finds neither the service's variable set nor a local
// server answering; it is a module of its own so that no other module of
// the project requires testcontainers-go and what it pulls in.
//
//	containers postgres|redis
//
// Exit status: 0 after the container was removed, 3 when no Docker engine
// is reachable, 1 when the container did not start, 2 on a usage error.
// Besides this program, testcontainers-go's reaper (Ryuk) removes the
// container about ten seconds after this program has gone, however it went.
// With the reaper disabled (TESTCONTAINERS_RYUK_DISABLED=true) a container
// outlives a killed starter, labelled outbox.testenv=1:
// docker rm -f $(docker ps -aq --filter label=outbox.testenv=1).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// Images of the containers; the oldest versions the project supports are
// PostgreSQL 13 and Redis 6.2 (README.md); these are current ones.
const (
	postgresImage = "postgres:17-alpine"
	redisImage    = "redis:7-alpine"
)

const (
	// dockerTimeout bounds finding a Docker engine: with none, the tests
	// go on (and skip or fail) within seconds, whatever DOCKER_HOST says.
	dockerTimeout = 10 * time.Second
	// startTimeout bounds starting a container, an image pull included.
	startTimeout = 5 * time.Minute
)

// Exit statuses (internal/testenv reads exitNoDocker).
const (
	exitFailed   = 1
	exitUsage    = 2
	exitNoDocker = 3
)

// errNoDocker is wrapped by the error of a start when no Docker engine is
// reachable.
var errNoDocker = errors.New("no Docker engine is reachable")

// labels mark the containers this program starts (see the package doc).
var labels = map[string]string{"outbox.testenv": "1"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run starts the container args name, writes its URL to stdout, waits for
// stdin to end and removes the container; it returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	starts := map[string]func(ctx context.Context) (testcontainers.Container, string, error){
		"postgres": startPostgres, "redis": startRedis,
	}
	if len(args) != 1 || starts[args[0]] == nil {
		fmt.Fprintln(stderr, "usage: containers postgres|redis")
		return exitUsage
	}
	c, u, err := start(args[0], starts[args[0]])
	if err != nil {
		fmt.Fprintf(stderr, "containers: %v\n", err)
		if errors.Is(err, errNoDocker) {
			return exitNoDocker
		}
		return exitFailed
	}
	if testcontainers.ReadConfig().Config.RyukDisabled {
		fmt.Fprintf(stderr, "containers: %s runs at %s; the testcontainers reaper is disabled, so it outlives a killed test binary: "+
			"docker rm -f $(docker ps -aq --filter label=outbox.testenv=1)\n", args[0], redact(u))
	}
	fmt.Fprintln(stdout, u)
	_, _ = io.Copy(io.Discard, stdin)
	if err := testcontainers.TerminateContainer(c); err != nil {
		fmt.Fprintf(stderr, "containers: removing the %s container: %v\n", args[0], err)
		return exitFailed
	}
	return 0
}

// start checks for a Docker engine, then starts a container with
// startFn under the start timeout, turning a panic into an error.
func start(image string, startFn func(ctx context.Context) (testcontainers.Container, string, error)) (c testcontainers.Container, u string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	err = dockerHealth(ctx)
	cancel()
	if err != nil {
		return nil, "", fmt.Errorf("%w (testcontainers-go: %v)", errNoDocker, err)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("starting %s: panic: %v", image, r)
		}
	}()
	ctx, cancel = context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, u, err = startFn(ctx)
	if err != nil {
		// A container that started and then failed is the reaper's to
		// remove; terminating it here as well does no harm.
		_ = testcontainers.TerminateContainer(c)
		return nil, "", fmt.Errorf("starting %s: %w", image, err)
	}
	return c, u, nil
}

func dockerHealth(ctx context.Context) (err error) {
	// testcontainers-go panics on some paths where the engine is missing.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	// Finding the engine is cached for the process by testcontainers-go:
	// doing it first under ctx keeps an unreachable DOCKER_HOST (a TCP
	// address that drops packets) from hanging the calls below, which use
	// no deadline of their own.
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	_ = cli.Close()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	return p.Health(ctx) // closes p
}

func startPostgres(ctx context.Context) (testcontainers.Container, string, error) {
	c, err := tcpostgres.Run(ctx, postgresImage,
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.BasicWaitStrategies(),
		// A throwaway server: durability buys nothing.
		testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"),
		testcontainers.WithLabels(labels),
	)
	if err != nil {
		return c, "", err
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	return c, u, err
}

func startRedis(ctx context.Context) (testcontainers.Container, string, error) {
	c, err := tcredis.Run(ctx, redisImage,
		testcontainers.WithCmd("redis-server", "--save", "", "--appendonly", "no"),
		testcontainers.WithLabels(labels),
	)
	if err != nil {
		return c, "", err
	}
	u, err := c.ConnectionString(ctx)
	return c, u + "/0", err
}

// redact returns u with its password replaced, for messages.
func redact(u string) string {
	if pu, err := neturl.Parse(u); err == nil {
		return pu.Redacted()
	}
	return "(a URL that does not parse)"
}
