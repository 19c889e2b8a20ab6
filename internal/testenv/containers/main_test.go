package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNoDockerEngine runs the starter where no Docker engine is (DOCKER_HOST
// names a socket that does not exist, the home directory holds no
// ~/.testcontainers.properties): testcontainers-go must be asked and must
// give up within seconds, and the starter must exit with exitNoDocker and
// say why. It runs in a process of its own because testcontainers-go caches
// what it finds for the process.
func TestNoDockerEngine(t *testing.T) {
	for _, sock := range []string{"/var/run/docker.sock", fmt.Sprintf("/run/user/%d/docker.sock", os.Getuid())} {
		if _, err := os.Stat(sock); err == nil {
			t.Skipf("this machine has a Docker socket at %s, which testcontainers-go finds whatever DOCKER_HOST says; "+
				"the branch without Docker is tested where there is none (as in CI)", sock)
		}
	}
	if os.Getenv("OUTBOX_CONTAINERS_CHILD") == "1" {
		var stdout, stderr bytes.Buffer
		code := run([]string{"postgres"}, strings.NewReader(""), &stdout, &stderr)
		fmt.Printf("exit=%d stdout=%q stderr=%q\n", code, stdout.String(), stderr.String())
		return
	}
	home := t.TempDir()
	sock := filepath.Join(home, "no-docker.sock")
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "HOME" || name == "XDG_RUNTIME_DIR" || strings.HasPrefix(name, "DOCKER_") || strings.HasPrefix(name, "TESTCONTAINERS_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "OUTBOX_CONTAINERS_CHILD=1", "DOCKER_HOST=unix://"+sock, "HOME="+home, "XDG_RUNTIME_DIR="+home)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoDockerEngine$", "-test.count=1")
	cmd.Env = env
	begin := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(begin)
	t.Logf("child ran in %v:\n%s", took.Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), fmt.Sprintf("exit=%d ", exitNoDocker)) {
		t.Errorf("the starter did not exit with %d (no Docker engine)", exitNoDocker)
	}
	for _, want := range []string{`stdout=""`, "no Docker engine is reachable", "testcontainers-go:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the child's output does not mention %q", want)
		}
	}
	if took > 2*dockerTimeout {
		t.Errorf("giving up took %v; finding no Docker engine must take seconds", took)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"mysql"}, {"postgres", "redis"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, strings.NewReader(""), &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "usage: containers postgres|redis") {
			t.Errorf("run(%q) = %d, %q; want %d and the usage", args, code, stderr.String(), exitUsage)
		}
	}
}
