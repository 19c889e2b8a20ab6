package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeService is a service whose probe and container are stubs that count
// their calls.
func fakeService(pingErr error, startURL string, startErr error) (s *service, pings, starts *atomic.Int32) {
	pings, starts = new(atomic.Int32), new(atomic.Int32)
	s = &service{
		name:     "FakeDB",
		variable: "OUTBOX_TESTENV_FAKE_URL",
		fallback: "fake://127.0.0.1:1/default",
		ping: func(context.Context, string) error {
			pings.Add(1)
			return pingErr
		},
		start: func() (string, error) {
			starts.Add(1)
			return startURL, startErr
		},
	}
	return s, pings, starts
}

func TestServiceDecides(t *testing.T) {
	down := errors.New("connection refused")
	noDocker := fmt.Errorf("%w (testcontainers-go: socket not found)", errNoDocker)
	for _, tc := range []struct {
		name           string
		variable       string // OUTBOX_TESTENV_FAKE_URL, when set
		pingErr        error
		startURL       string
		startErr       error
		want           string
		pings, starts  int32
		remedyMentions string
	}{
		{name: "VariableWinsAndNothingIsTried", variable: "fake://from-env",
			want: "fake://from-env", remedyMentions: "OUTBOX_TESTENV_FAKE_URL is set, so neither"},
		{name: "LocalDefaultWhenItAnswers",
			want: "fake://127.0.0.1:1/default", pings: 1},
		{name: "ContainerWhenNothingLocal", pingErr: down, startURL: "fake://container:5432/x",
			want: "fake://container:5432/x", pings: 1, starts: 1, remedyMentions: "container did not answer"},
		{name: "DefaultWhenNoDocker", pingErr: down, startErr: noDocker,
			want: "fake://127.0.0.1:1/default", pings: 1, starts: 1, remedyMentions: "no Docker engine is reachable (testcontainers-go: socket not found)"},
		{name: "DefaultWhenTheContainerFails", pingErr: down, startErr: errors.New("pull access denied"),
			want: "fake://127.0.0.1:1/default", pings: 1, starts: 1, remedyMentions: "container did not start: pull access denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OUTBOX_TESTENV_FAKE_URL", tc.variable)
			s, pings, starts := fakeService(tc.pingErr, tc.startURL, tc.startErr)
			if !strings.Contains(s.remedy(), "set OUTBOX_TESTENV_FAKE_URL") {
				t.Errorf("remedy before the decision: %q", s.remedy())
			}
			if got := s.url(); got != tc.want {
				t.Errorf("url() = %q, want %q", got, tc.want)
			}
			if got := s.url(); got != tc.want {
				t.Errorf("second url() = %q, want %q", got, tc.want)
			}
			if pings.Load() != tc.pings || starts.Load() != tc.starts {
				t.Errorf("probes %d and starts %d, want %d and %d", pings.Load(), starts.Load(), tc.pings, tc.starts)
			}
			remedy := s.remedy()
			for _, want := range []string{
				"set OUTBOX_TESTENV_FAKE_URL", "./scripts/services.sh start", "run a Docker engine", tc.remedyMentions,
			} {
				if !strings.Contains(remedy, want) {
					t.Errorf("remedy %q does not mention %q", remedy, want)
				}
			}
		})
	}
}

func TestServiceDecidesOnceForConcurrentCallers(t *testing.T) {
	s, pings, starts := fakeService(errors.New("down"), "fake://container", nil)
	release := make(chan struct{})
	start := s.start
	s.start = func() (string, error) { <-release; return start() }
	var wg sync.WaitGroup
	urls := make([]string, 8)
	for i := range urls {
		wg.Go(func() { urls[i] = s.url() })
	}
	time.Sleep(10 * time.Millisecond) // let callers queue behind the first
	close(release)
	wg.Wait()
	for i, u := range urls {
		if u != "fake://container" {
			t.Errorf("caller %d got %q", i, u)
		}
	}
	if pings.Load() != 1 || starts.Load() != 1 {
		t.Errorf("probed %d times and started %d containers, want 1 and 1", pings.Load(), starts.Load())
	}
}

func TestOnlyPostgresAndRedisHaveAContainerFallback(t *testing.T) {
	if s := serviceFor("OUTBOX_REDIS_CLUSTER_ADDRS"); s != nil {
		t.Fatalf("the Redis Cluster has no container fallback, but serviceFor found %q", s.name)
	}
	for _, s := range []*service{natsService, amqpService, mysqlService} {
		if !s.containerless {
			t.Errorf("%s has a container fallback", s.name)
		}
		if r := s.remedy(); strings.Contains(r, "Docker") || !strings.Contains(r, s.variable) {
			t.Errorf("%s's remedy %q talks of Docker or does not name %s", s.name, r, s.variable)
		}
	}
	for _, v := range []string{"OUTBOX_POSTGRES_URL", "OUTBOX_REDIS_URL"} {
		if s := serviceFor(v); s == nil || s.variable != v {
			t.Errorf("serviceFor(%q) = %v", v, s)
		}
	}
}

// The child half of TestNoDockerEngine: run only by it, in a process of its
// own, because testcontainers-go caches what it finds for the process.
func TestNoDockerEngineChild(t *testing.T) {
	if os.Getenv("OUTBOX_TESTENV_NO_DOCKER_CHILD") != "1" {
		t.Skip("run by TestNoDockerEngine")
	}
	// Nothing listens on port 1, so the local defaults do not answer.
	postgresService.fallback = "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable"
	redisService.fallback = "redis://127.0.0.1:1/0"
	for _, s := range []*service{postgresService, redisService} {
		t.Run(s.name, func(t *testing.T) {
			begin := time.Now()
			u := s.url()
			took := time.Since(begin)
			t.Logf("decided in %v", took.Round(time.Millisecond))
			if u != s.fallback {
				t.Fatalf("url() = %q, want the local default %q: no Docker engine should be found", u, s.fallback)
			}
			if took > 10*time.Second {
				t.Errorf("deciding took %v; finding no Docker engine must take seconds", took)
			}
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			defer cancel()
			err := s.ping(ctx, u)
			if err == nil {
				t.Fatalf("a server answers at %s", u)
			}
			Unavailable(t, s.name, s.variable, err)
		})
	}
}

// TestNoDockerEngine runs the real decision, testcontainers-go included,
// where no Docker engine is: DOCKER_HOST names a socket that does not exist
// and the home directory holds no ~/.testcontainers.properties. Each service
// must fall through, within seconds, to a skip (a failure with
// OUTBOX_REQUIRE_SERVICES=1) whose message names all three ways to get it.
func TestNoDockerEngine(t *testing.T) {
	t.Parallel()
	// testcontainers-go also looks at these whatever DOCKER_HOST says.
	for _, sock := range []string{"/var/run/docker.sock", fmt.Sprintf("/run/user/%d/docker.sock", os.Getuid())} {
		if _, err := os.Stat(sock); err == nil {
			t.Skipf("this machine has a Docker socket at %s, which testcontainers-go finds whatever DOCKER_HOST says; "+
				"the branch without Docker is tested where there is none (as in CI)", sock)
		}
	}
	for _, required := range []bool{false, true} {
		t.Run(fmt.Sprintf("Required=%v", required), func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			sock := filepath.Join(home, "no-docker.sock")
			env := []string{
				"OUTBOX_TESTENV_NO_DOCKER_CHILD=1",
				"DOCKER_HOST=unix://" + sock,
				"HOME=" + home,
				"XDG_RUNTIME_DIR=" + home,
			}
			if required {
				env = append(env, "OUTBOX_REQUIRE_SERVICES=1")
			}
			for _, kv := range os.Environ() {
				name, _, _ := strings.Cut(kv, "=")
				switch {
				case name == "OUTBOX_POSTGRES_URL", name == "OUTBOX_REDIS_URL", name == "OUTBOX_REQUIRE_SERVICES",
					name == "HOME", name == "XDG_RUNTIME_DIR",
					strings.HasPrefix(name, "DOCKER_"), strings.HasPrefix(name, "TESTCONTAINERS_"):
				default:
					env = append(env, kv)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNoDockerEngineChild$", "-test.v", "-test.count=1")
			cmd.Env = env
			begin := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(begin)
			t.Logf("child ran in %v:\n%s", took.Round(time.Millisecond), out)
			if ctx.Err() != nil {
				t.Fatal("the child hung: finding no Docker engine must take seconds")
			}
			if required {
				if err == nil || !strings.Contains(string(out), "--- FAIL: TestNoDockerEngineChild/PostgreSQL") ||
					!strings.Contains(string(out), "--- FAIL: TestNoDockerEngineChild/Redis") {
					t.Errorf("with OUTBOX_REQUIRE_SERVICES=1 both services must fail (exit error: %v)", err)
				}
			} else if err != nil || !strings.Contains(string(out), "--- SKIP: TestNoDockerEngineChild/PostgreSQL") ||
				!strings.Contains(string(out), "--- SKIP: TestNoDockerEngineChild/Redis") {
				t.Errorf("without OUTBOX_REQUIRE_SERVICES both services must skip (exit error: %v)", err)
			}
			for _, want := range []string{
				"PostgreSQL is not reachable", "set OUTBOX_POSTGRES_URL", "a PostgreSQL container",
				"Redis is not reachable", "set OUTBOX_REDIS_URL", "a Redis container",
				"start local services with ./scripts/services.sh start", "run a Docker engine",
				"no Docker engine is reachable", sock,
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("the child's output does not mention %q", want)
				}
			}
		})
	}
}
