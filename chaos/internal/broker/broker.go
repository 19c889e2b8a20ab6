// Package broker runs the chaos harness's Kafka: franz-go's in-memory
// kfake as a process of its own (internal/cmd/kfakebroker), with faults
// injected through its control API and its topics read back as
// [history.Delivery] values.
//
// # Faults
//
// Every fault applies to Produce requests only (on every broker of the
// process), to the next n of them, in the order armed; arming is
// cumulative and each Produce request takes at most one fault (a drop,
// else an error, else a delay):
//
//   - [Broker.FailProduce]: the broker answers each partition of the
//     request with the Kafka error code and writes nothing. The client sees
//     the error per partition: franz-go retries a retriable one (after a
//     metadata refresh for most codes, which it does at most once per
//     MetadataMinAge, 5s by default, so each fault can cost that long) and
//     fails the records on one that is not. REQUEST_TIMED_OUT leaves the
//     client unsure whether the batch was written, so franz-go retries it
//     past its RecordRetries limit.
//   - [Broker.DelayProduce]: the broker holds the request for d, then
//     writes and answers it. Only the request's connection waits (later
//     requests on it queue behind: Kafka answers a connection in order);
//     other connections and brokers are served meanwhile. franz-go
//     produces on a connection of its own, so its metadata and fetches go
//     on. A d above the client's produce timeout (franz-go:
//     ProduceRequestTimeout plus RequestTimeoutOverhead, 10s+10s) makes the
//     client drop the connection and retry while the broker still writes
//     the first copy: written but unacknowledged.
//   - [Broker.DropConnections]: the broker closes the request's connection
//     without answering and writes nothing. The client sees its connection
//     end with the request in flight, reconnects and retries; the
//     idempotent producer's records land once.
//
// [Broker.Reset] disarms what is not yet applied and releases held
// requests; [Broker.Stats] counts what was applied.
package broker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outboxrelay/outbox/chaos/internal/proc"
)

// Build builds kfakebroker from the module at repoRoot into outDir and
// returns the binary's path.
func Build(ctx context.Context, repoRoot, outDir string) (bin string, err error) {
	bin = filepath.Join(outDir, "kfakebroker")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./internal/cmd/kfakebroker")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("broker: go build ./internal/cmd/kfakebroker in %s: %v\n%s", repoRoot, err, out)
	}
	return bin, nil
}

// Options configure Start.
type Options struct {
	// Brokers is the number of brokers in the process. Default 1.
	Brokers int
	// Partitions is the partition count of Topics and of auto-created
	// topics. Default 4.
	Partitions int
	// Topics are created at start.
	Topics []string
	// AutoCreate lets clients create topics by producing to them.
	// Default false: producing to another topic fails.
	AutoCreate bool
	// StartTimeout bounds the wait for the broker to listen. Default 15s.
	StartTimeout time.Duration
}

// Broker is a running kfakebroker process. Its methods are safe for
// concurrent use.
type Broker struct {
	p       *proc.Proc
	brokers string
	api     string // http://127.0.0.1:port
	http    *http.Client
}

// Files Start writes in its dir.
const (
	logName     = "kfakebroker.log"
	controlName = "kfakebroker.control"
)

// Start starts bin (from Build) with its log (standard output and error)
// and control file in dir, and returns once the broker listens and its
// control API is up. An earlier run's files in dir are replaced.
func Start(ctx context.Context, bin, dir string, o Options) (*Broker, error) {
	if o.Brokers == 0 {
		o.Brokers = 1
	}
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 15 * time.Second
	}
	if o.Brokers < 0 || o.Partitions < 0 {
		return nil, fmt.Errorf("broker: Options.Brokers %d and Partitions %d must be positive", o.Brokers, o.Partitions)
	}
	logPath, ctlPath := filepath.Join(dir, logName), filepath.Join(dir, controlName)
	for _, f := range []string{logPath, ctlPath} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("broker: %w", err)
		}
	}
	args := []string{"-brokers", strconv.Itoa(o.Brokers), "-partitions", strconv.Itoa(o.Partitions), "-control-file", ctlPath}
	if len(o.Topics) > 0 {
		args = append(args, "-topics", strings.Join(o.Topics, ","))
	}
	if o.AutoCreate {
		args = append(args, "-auto-create")
	}
	p, err := proc.Start("kfakebroker", logPath, bin, args, nil)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	b := &Broker{p: p, http: &http.Client{Timeout: 10 * time.Second}}
	if err := b.await(ctx, logPath, ctlPath, o.StartTimeout); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return b, nil
}

// await polls for the control file (written after the broker line) and
// then reads the broker line from the log.
func (b *Broker) await(ctx context.Context, logPath, ctlPath string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if addr, err := os.ReadFile(ctlPath); err == nil {
			brokers, err := brokerLine(logPath)
			if err != nil {
				return err
			}
			b.brokers, b.api = brokers, "http://"+strings.TrimSpace(string(addr))
			return nil
		}
		select {
		case <-b.p.Done():
			_, werr := b.p.Exited()
			return fmt.Errorf("broker: kfakebroker exited before listening (%v); see %s", werr, logPath)
		case <-ctx.Done():
			return fmt.Errorf("broker: kfakebroker did not listen: %w; see %s", ctx.Err(), logPath)
		case <-tick.C:
		}
	}
}

// brokerLine returns the log's first line that is a list of host:port.
func brokerLine(logPath string) (string, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return "", fmt.Errorf("broker: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		ok := line != ""
		for _, a := range strings.Split(line, ",") {
			if _, _, err := net.SplitHostPort(a); err != nil {
				ok = false
			}
		}
		if ok {
			return line, nil
		}
	}
	return "", fmt.Errorf("broker: no broker list in %s", logPath)
}

// Brokers is the broker list, comma-separated host:port (what
// --kafka-brokers and kgo.SeedBrokers after a split take).
func (b *Broker) Brokers() string { return b.brokers }

// Proc is the broker process, to signal it (SIGSTOP freezes the whole
// broker; SIGKILL loses every record).
func (b *Broker) Proc() *proc.Proc { return b.p }

// Close stops the process: SIGTERM, then SIGKILL after 5s. It returns nil
// if the process exited on its own, including earlier.
func (b *Broker) Close() error {
	err := b.p.Terminate(5 * time.Second)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			// Killed by someone (a test's Proc().Kill()): gone, as
			// asked.
			return nil
		}
	}
	return err
}

// FailProduce makes the next n Produce requests fail with the Kafka error
// code (a name such as "NOT_ENOUGH_REPLICAS"), writing nothing.
func (b *Broker) FailProduce(ctx context.Context, n int, code string) error {
	return b.post(ctx, "/produce-errors", url.Values{"count": {strconv.Itoa(n)}, "code": {code}})
}

// DelayProduce holds the next n Produce requests for d each, then handles
// them.
func (b *Broker) DelayProduce(ctx context.Context, n int, d time.Duration) error {
	return b.post(ctx, "/produce-delay", url.Values{"count": {strconv.Itoa(n)}, "delay": {d.String()}})
}

// DropConnections closes the connection of the next n Produce requests
// without answering them.
func (b *Broker) DropConnections(ctx context.Context, n int) error {
	return b.post(ctx, "/drop-connections", url.Values{"count": {strconv.Itoa(n)}})
}

// Reset disarms every fault not yet applied and releases held requests.
func (b *Broker) Reset(ctx context.Context) error {
	return b.post(ctx, "/reset", nil)
}

// Stats counts faults: applied since the broker started (Reset does not
// clear them) and still armed.
type Stats struct {
	Applied struct {
		ProduceErrors      int64 `json:"produce_errors"`
		ProduceDelays      int64 `json:"produce_delays"`
		DroppedConnections int64 `json:"dropped_connections"`
	} `json:"applied"`
	Armed struct {
		ProduceErrors   int `json:"produce_errors"`
		ProduceDelays   int `json:"produce_delays"`
		DropConnections int `json:"drop_connections"`
	} `json:"armed"`
}

// Stats returns the fault counts.
func (b *Broker) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	body, err := b.do(ctx, http.MethodGet, "/stats", nil)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return s, fmt.Errorf("broker: /stats answered %q: %w", body, err)
	}
	return s, nil
}

func (b *Broker) post(ctx context.Context, path string, q url.Values) error {
	_, err := b.do(ctx, http.MethodPost, path, q)
	return err
}

func (b *Broker) do(ctx context.Context, method, path string, q url.Values) ([]byte, error) {
	u := b.api + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("broker: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("broker: %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("broker: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
