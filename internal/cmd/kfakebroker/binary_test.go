package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// binary builds the command once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kfakebroker-test")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "kfakebroker")
		out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = err
			builtBin = string(out)
		}
	})
	require.NoError(t, buildErr, builtBin)
	return builtBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" && buildErr == nil {
		_ = os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// startBinary runs the built command with -control-file and returns its
// brokers, the control API's base URL once the control file appears, and
// a function reading everything it wrote to standard output so far.
func startBinary(t *testing.T) (brokers []string, api string, stdout func() string) {
	t.Helper()
	dir := t.TempDir()
	ctl := filepath.Join(dir, "control")
	out, err := os.Create(filepath.Join(dir, "stdout"))
	require.NoError(t, err)
	defer out.Close()
	cmd := exec.Command(binary(t), "-partitions", "2", "-topics", testTopic, "-control-file", ctl)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
	})
	stdout = func() string {
		b, err := os.ReadFile(out.Name())
		require.NoError(t, err)
		return string(b)
	}
	var addr []byte
	require.Eventually(t, func() bool {
		addr, err = os.ReadFile(ctl)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.True(t, strings.HasSuffix(string(addr), "\n"), "the control file is written whole: %q", addr)
	line, ok := strings.CutSuffix(stdout(), "\n")
	require.True(t, ok, "the broker line is printed before the control file is written: %q", stdout())
	return strings.Split(line, ","), "http://" + strings.TrimSpace(string(addr)), stdout
}

func TestBinary(t *testing.T) {
	t.Parallel()
	for _, tc := range faultCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			brokers, api, stdout := startBinary(t)
			tc.run(t, brokers, api)
			require.Equal(t, strings.Join(brokers, ",")+"\n", stdout(), "standard output holds only the broker line")
		})
	}
}

func TestBinaryWithoutControlFileServesNoAPI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "-partitions", "1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	buf := make([]byte, 256)
	n, err := out.Read(buf)
	require.NoError(t, err)
	require.Regexp(t, `^127\.0\.0\.1:\d+\n$`, string(buf[:n]))
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
}
