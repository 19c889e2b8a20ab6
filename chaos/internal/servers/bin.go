package servers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNotInstalled is wrapped by the error of a start whose server binary
// is missing.
var ErrNotInstalled = errors.New("not installed")

// lookPath finds bin on PATH, or says which Debian package provides it.
func lookPath(bin, pkg string) (string, error) {
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("servers: %s %w: it is not on PATH (Debian: apt-get install %s)", bin, ErrNotInstalled, pkg)
	}
	return p, nil
}

// postgresBinDir is the directory of initdb and pg_ctl: pg_config --bindir
// when it holds them, else the newest /usr/lib/postgresql/*/bin that does.
func postgresBinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "pg_ctl"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); dir != "" && has(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int {
		switch va, vb := version(a), version(b); {
		case va > vb:
			return -1
		case va < vb:
			return 1
		}
		return 0
	})
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("servers: PostgreSQL's initdb and pg_ctl %w: neither pg_config --bindir nor /usr/lib/postgresql/*/bin has them (Debian: apt-get install postgresql)", ErrNotInstalled)
}

// tail is the last n lines of the file at path, for errors; empty if it
// cannot be read.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return lastLines(string(b), n)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
