package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// errNoDocker is wrapped by the error of a start when no Docker engine is
// reachable.
var errNoDocker = errors.New("no Docker engine is reachable")

const (
	// startTimeout bounds starting a container: building the starter, an
	// image pull and the container's start included.
	startTimeout = 10 * time.Minute
	// containersPkg is the program that starts the containers with
	// testcontainers-go, a module of its own so that no module of the
	// project requires testcontainers-go to run its tests.
	containersPkg = "github.com/outboxrelay/outbox/internal/testenv/containers"
	// exitNoDocker is the starter's exit status when it finds no Docker
	// engine.
	exitNoDocker = 3
)

// starters keeps the stdin of every starter this binary ran: a starter
// stops its container when its stdin ends, which is when this binary exits,
// however it exits.
var starters struct {
	sync.Mutex
	stdin []io.WriteCloser
}

// findDocker reports, with the standard library and within milliseconds,
// whether there is plainly no Docker engine to ask: DOCKER_HOST names a
// Unix socket that does not exist, or DOCKER_HOST is unset and there is no
// ~/.testcontainers.properties and no Docker socket where testcontainers-go
// looks. Otherwise it returns nil, and the starter asks testcontainers-go.
func findDocker() error {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if p, ok := strings.CutPrefix(h, "unix://"); ok {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("%w (DOCKER_HOST is %s, and %s does not exist)", errNoDocker, h, p)
			}
		}
		return nil
	}
	home, _ := os.UserHomeDir()
	if home != "" {
		if _, err := os.Stat(filepath.Join(home, ".testcontainers.properties")); err == nil {
			return nil
		}
	}
	socks := []string{"/var/run/docker.sock", fmt.Sprintf("/run/user/%d/docker.sock", os.Getuid())}
	if home != "" {
		socks = append(socks, filepath.Join(home, ".docker", "run", "docker.sock"), filepath.Join(home, ".docker", "desktop", "docker.sock"))
	}
	for _, s := range socks {
		if _, err := os.Stat(s); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w (DOCKER_HOST is unset, there is no ~/.testcontainers.properties and no socket at %s)", errNoDocker, strings.Join(socks, ", "))
}

// startContainer starts a container of service (postgres or redis) through
// the starter program (built with the go command from this checkout) and returns its URL. The starter runs as long as this
// test binary: it removes the container when the binary's end closes its
// standard input (and testcontainers-go's reaper removes it too).
func startContainer(service string) (string, error) {
	if err := findDocker(); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	bin, err := buildStarter(ctx)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, service)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("running the container starter: %w", err)
	}
	// A running program needs no file: remove it now, whatever comes.
	_ = os.RemoveAll(filepath.Dir(bin))
	url := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		url <- strings.TrimSpace(line)
	}()
	select {
	case u := <-url:
		if u != "" {
			starters.Lock()
			starters.stdin = append(starters.stdin, stdin)
			starters.Unlock()
			if stderr.Len() > 0 {
				fmt.Fprint(os.Stderr, stderr.String())
			}
			return u, nil
		}
	case <-ctx.Done():
		_ = cmd.Process.Kill()
	}
	_ = stdin.Close()
	werr := cmd.Wait()
	msg := strings.TrimSpace(stderr.String())
	var exit *exec.ExitError
	if errors.As(werr, &exit) && exit.ExitCode() == exitNoDocker {
		return "", fmt.Errorf("%w (%s)", errNoDocker, msg)
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("starting a %s container took over %v: %s", service, startTimeout, msg)
	}
	return "", fmt.Errorf("starting a %s container: %v: %s", service, werr, msg)
}

// buildStarter builds the starter program into a new temporary directory
// and returns its path.
func buildStarter(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "outbox-testenv-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "containers")
	out, err := exec.CommandContext(ctx, goTool(), "build", "-o", bin, containersPkg).CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("building the container starter (go build %s): %v: %s", containersPkg, err, bytes.TrimSpace(out))
	}
	return bin, nil
}

// goTool is the go command: the one of this toolchain when it is there.
func goTool() string {
	if p := filepath.Join(os.Getenv("GOROOT"), "bin", "go"); os.Getenv("GOROOT") != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}
