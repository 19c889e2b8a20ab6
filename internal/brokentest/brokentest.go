// Package brokentest runs a conformance suite against deliberately broken
// implementations, each in a subprocess of the test binary, and checks that
// the suite rejects each one with the cases that pin the contract it
// breaks. The backend suite (conformance) and the sink suite
// (conformance/sinksuite) prove themselves with it.
//
// A suite takes a *testing.T, so a run that must fail needs a test binary of
// its own: the test binary runs itself with -test.run selecting a child test
// (conventionally TestBrokenChild) and the variant's cases, and the child
// test reads the variant's name from an environment variable.
package brokentest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Variant is one deliberately broken implementation.
type Variant struct {
	// Name is what the child reads from the environment variable.
	Name string
	// Breaks says which contract is broken, and how.
	Breaks string
	// CaughtBy lists the subtests of the suite ("Area/Case", or deeper)
	// that must fail on it.
	CaughtBy []string
}

// Children runs a test binary's child test in subprocesses.
type Children struct {
	// Exe is the test binary (os.Executable of the parent test).
	Exe string
	// Test is the child test's name, such as "TestBrokenChild".
	Test string
	// Env is the environment variable that names the variant.
	Env string
	// Slots bounds the children running at once.
	Slots int
}

// Run runs the child's subtests named in names (see [Pattern]) on variant
// and returns the child's output (go test -v) and its exit error.
func (c Children) Run(ctx context.Context, variant string, names []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Exe, "-test.run="+Pattern(c.Test, names), "-test.v", "-test.count=1",
		"-test.parallel=16", "-test.timeout=150s")
	cmd.Env = append(os.Environ(), c.Env+"="+variant)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Reject runs every variant in a child (at most Slots at once) and fails
// one subtest of t per variant whose child passed, failed no subtest (a
// crash or a timeout), or did not fail each of its CaughtBy subtests. It
// logs, per variant, the subtests that failed on it, under title.
func (c Children) Reject(t *testing.T, title string, variants []Variant) {
	t.Helper()
	slots := make(chan struct{}, max(c.Slots, 1))
	type result struct {
		out    []byte
		err    error
		failed []string
	}
	results := make([]result, len(variants))
	var wg sync.WaitGroup
	for i, v := range variants {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			out, err := c.Run(t.Context(), v.Name, v.CaughtBy)
			results[i] = result{out: out, err: err, failed: Failing(c.Test, out)}
		})
	}
	wg.Wait()
	for i, v := range variants {
		r := results[i]
		t.Run(v.Name, func(t *testing.T) {
			var exit *exec.ExitError
			if !errors.As(r.err, &exit) {
				t.Fatalf("the suite PASSED against variant %q (%s), or could not run (%v); it must fail.\n%s", v.Name, v.Breaks, r.err, Tail(string(r.out), 40))
			}
			if len(r.failed) == 0 {
				t.Fatalf("the suite exited with %v against %q but no subtest failed (a crash or timeout?):\n%s", r.err, v.Name, Tail(string(r.out), 40))
			}
			for _, want := range v.CaughtBy {
				if !slices.Contains(r.failed, want) {
					t.Errorf("variant %q (%s) was not caught by %s; failing subtests: %v\n%s", v.Name, v.Breaks, want, r.failed, Tail(string(r.out), 40))
				}
			}
		})
	}
	var b strings.Builder
	b.WriteString(title + "\n")
	for i, v := range variants {
		fmt.Fprintf(&b, "  %-24s (%s)\n      → %s\n", v.Name, v.Breaks, strings.Join(results[i].failed, ", "))
	}
	t.Log(b.String())
}

// Pattern is the -test.run pattern of the child test that selects the
// subtests named ("Area/Case" or deeper) and, as -run matches level by
// level, the others of the same areas with one of those case names.
func Pattern(child string, names []string) string {
	var areas, cases []string
	for _, n := range names {
		parts := strings.SplitN(n, "/", 3)
		if !slices.Contains(areas, parts[0]) {
			areas = append(areas, parts[0])
		}
		if len(parts) > 1 && !slices.Contains(cases, parts[1]) {
			cases = append(cases, parts[1])
		}
	}
	pat := "^" + child + "$/^(" + strings.Join(areas, "|") + ")$"
	if len(cases) > 0 {
		pat += "/^(" + strings.Join(cases, "|") + ")$"
	}
	return pat
}

// Failing returns, sorted, the names below child/ of the failing subtests
// under an area ("Area/Case" and deeper) in go test -v output.
func Failing(child string, out []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "--- FAIL: "+child+"/")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		if strings.Contains(name, "/") && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
