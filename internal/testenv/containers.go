package testenv

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
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

// errNoDocker is wrapped by the error of a start when no Docker engine is
// reachable.
var errNoDocker = errors.New("no Docker engine is reachable")

// labels mark the containers this package starts (see the package doc).
var labels = map[string]string{"outbox.testenv": "1"}

// docker reports, once per test binary, whether a Docker engine is
// reachable: nil, or an error wrapping errNoDocker.
var docker = sync.OnceValue(func() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	if err := dockerHealth(ctx); err != nil {
		return fmt.Errorf("%w (testcontainers-go: %v)", errNoDocker, err)
	}
	return nil
})

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

// run starts a container with start, under the Docker check and the start
// timeout, turning a panic into an error.
func run(image string, start func(ctx context.Context) (string, error)) (u string, err error) {
	if err := docker(); err != nil {
		return "", err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("starting %s: panic: %v", image, r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	u, err = start(ctx)
	if err != nil {
		return "", fmt.Errorf("starting %s: %w", image, err)
	}
	if testcontainers.ReadConfig().Config.RyukDisabled {
		fmt.Fprintf(os.Stderr, "testenv: %s runs at %s; the testcontainers reaper is disabled, so it outlives this test binary: "+
			"docker rm -f $(docker ps -aq --filter label=outbox.testenv=1)\n", image, redact(u))
	}
	return u, nil
}

func startPostgres() (string, error) {
	return run(postgresImage, func(ctx context.Context) (string, error) {
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
			// A container that started and then failed is the reaper's to
			// remove; terminating it here as well does no harm.
			_ = testcontainers.TerminateContainer(c)
			return "", err
		}
		return c.ConnectionString(ctx, "sslmode=disable")
	})
}

func startRedis() (string, error) {
	return run(redisImage, func(ctx context.Context) (string, error) {
		c, err := tcredis.Run(ctx, redisImage,
			testcontainers.WithCmd("redis-server", "--save", "", "--appendonly", "no"),
			testcontainers.WithLabels(labels),
		)
		if err != nil {
			_ = testcontainers.TerminateContainer(c)
			return "", err
		}
		u, err := c.ConnectionString(ctx)
		return u + "/0", err
	})
}

func pingPostgres(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Ping(ctx)
}

func pingRedis(ctx context.Context, url string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opt.MaxRetries = -1 // one try: this is a probe
	opt.DialerRetries = 1
	c := redis.NewClient(opt)
	defer c.Close()
	return c.Ping(ctx).Err()
}

// redact returns u with its password replaced, for messages.
func redact(u string) string {
	if pu, err := neturl.Parse(u); err == nil {
		return pu.Redacted()
	}
	return "(a URL that does not parse)"
}
