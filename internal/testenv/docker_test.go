package testenv

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// findDocker answers from the environment alone.
func TestFindDocker(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_RUNTIME_DIR", home)
	missing := filepath.Join(home, "no-docker.sock")
	t.Setenv("DOCKER_HOST", "unix://"+missing)
	if err := findDocker(); !errors.Is(err, errNoDocker) || !strings.Contains(err.Error(), missing) {
		t.Errorf("DOCKER_HOST naming a missing socket: %v", err)
	}
	t.Setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
	if err := findDocker(); err != nil {
		t.Errorf("DOCKER_HOST naming a TCP address is for testcontainers-go to try: %v", err)
	}
}

// TestStarterWithoutDocker builds and runs the starter program, as a test
// binary does when it finds no server) where DOCKER_HOST names a TCP
// port nobody listens on: testcontainers-go finds no engine, the starter
// exits with exitNoDocker, and the error says so.
func TestStarterWithoutDocker(t *testing.T) {
	// HOME stays: the go command finds its module and build caches there.
	t.Setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
	u, err := startContainer("redis")
	if err == nil {
		t.Fatalf("a container started at %s with no Docker engine", redact(u))
	}
	if !errors.Is(err, errNoDocker) || !strings.Contains(err.Error(), "testcontainers-go:") {
		t.Fatalf("startContainer = %v, want the starter's no-Docker error", err)
	}
}
