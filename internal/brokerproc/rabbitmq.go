package brokerproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// RabbitMQ is a private RabbitMQ node: a beam process of its own,
// started from the rabbitmq-server script with a node name, ports, data
// and log directories and a configuration file of its own under one
// directory, listening for AMQP on 127.0.0.1 only, with no plugin (the
// management plugin is off). Its Erlang cookie lives in a HOME of its own
// under that directory, and it registers with the epmd already running
// (or starts one, as any Erlang node does); it never stops epmd or
// another node. Its methods are safe for concurrent use.
type RabbitMQ struct {
	// Node is the node name, unique to this node (outbox-<random>@localhost).
	Node string
	// Port is the AMQP port on 127.0.0.1; DistPort the Erlang
	// distribution port (rabbitmqctl talks to the node through it).
	Port, DistPort int
	// Dir holds the node's data (mnesia), logs, configuration and HOME.
	Dir string

	env []string

	server
}

// RabbitMQServerBin is the script that starts a node: the one the Debian
// package installs under /usr/lib/rabbitmq/bin (which runs the node as
// the calling user, unlike /usr/sbin/rabbitmq-server, which switches to
// the rabbitmq user), else rabbitmq-server on PATH. OUTBOX_RABBITMQ_BIN
// names the directory of rabbitmq-server and rabbitmqctl instead.
func RabbitMQServerBin() (server, ctl string, err error) {
	dirs := []string{os.Getenv("OUTBOX_RABBITMQ_BIN"), "/usr/lib/rabbitmq/bin"}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		s, c := filepath.Join(d, "rabbitmq-server"), filepath.Join(d, "rabbitmqctl")
		if _, err := os.Stat(s); err == nil {
			return s, c, nil
		}
	}
	s, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		return "", "", errors.New("brokerproc: rabbitmq-server not found (install it with ./scripts/services.sh install, or set OUTBOX_RABBITMQ_BIN to the directory of rabbitmq-server and rabbitmqctl)")
	}
	c, _ := exec.LookPath("rabbitmqctl")
	return s, c, nil
}

// StartRabbitMQ starts a node under dir (created if needed; a temporary
// directory of the test, typically) on ports picked with PickPort, and
// waits until it accepts AMQP connections or ctx ends. conf lines are
// added to its rabbitmq.conf (for example "max_message_size = 65536").
func StartRabbitMQ(ctx context.Context, dir string, conf ...string) (*RabbitMQ, error) {
	port, err := PickPort()
	if err != nil {
		return nil, err
	}
	dist, err := PickPort()
	if err != nil {
		return nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	r := &RabbitMQ{Node: "outbox-" + suffix + "@localhost", Port: port, DistPort: dist, Dir: dir}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("brokerproc: rabbitmq: %w", err)
	}
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte("OUTBOXCOOKIE"+strings.ToUpper(suffix)), 0o400); err != nil {
		return nil, fmt.Errorf("brokerproc: rabbitmq: cookie: %w", err)
	}
	lines := append([]string{
		"listeners.tcp.default = 127.0.0.1:" + strconv.Itoa(port),
		"log.console = false",
		"log.file.level = info",
	}, conf...)
	confPath := filepath.Join(dir, "rabbitmq.conf")
	if err := os.WriteFile(confPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("brokerproc: rabbitmq: %w", err)
	}
	plugins := filepath.Join(dir, "enabled_plugins")
	if err := os.WriteFile(plugins, []byte("[].\n"), 0o644); err != nil {
		return nil, fmt.Errorf("brokerproc: rabbitmq: %w", err)
	}
	r.env = []string{
		"HOME=" + home,
		"RABBITMQ_NODENAME=" + r.Node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(dist),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE=" + confPath,
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + plugins,
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf"), // absent: ignore the system's
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(dir, "advanced.config"),
		"RABBITMQ_PID_FILE=" + filepath.Join(dir, "pid"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		// The script then execs the VM instead of staying in front of it
		// (its own signal handling), so the process Start starts is the
		// beam process itself, which Kill kills. No systemd listens on it:
		// the node's ready notification fails, which it tolerates.
		"NOTIFY_SOCKET=" + filepath.Join(dir, "no-systemd.sock"),
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Start starts the node (again, after Kill or Stop) on the same ports and
// data, and waits until it accepts AMQP connections or ctx ends. It is an
// error to start a node that is running.
func (r *RabbitMQ) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil && !r.proc.Exited() {
		return fmt.Errorf("brokerproc: rabbitmq node %s is running", r.Node)
	}
	server, _, err := RabbitMQServerBin()
	if err != nil {
		return err
	}
	p, err := Start("rabbitmq "+r.Node, filepath.Join(r.Dir, "server.log"), server, nil, r.env)
	if err != nil {
		return err
	}
	r.proc = p
	if err := p.WaitTCP(ctx, r.Port); err != nil {
		p.Kill()
		return err
	}
	return nil
}

// URL is the AMQP URL of the node's default vhost, as guest (allowed from
// loopback).
func (r *RabbitMQ) URL() string {
	return "amqp://guest:guest@127.0.0.1:" + strconv.Itoa(r.Port) + "/"
}

// SyncMetadata makes what the node has declared so far (vhosts,
// exchanges, queues, bindings) survive a SIGKILL: RabbitMQ keeps them in
// Mnesia, whose transaction log is written through a buffer that is
// flushed only every few seconds, so a node killed right after a
// declaration can come back without it (seen: a queue came back without
// its binding, and every later publish was returned unroutable). A test or
// the chaos harness calls it after declaring a topology and before killing
// the node, as a topology declared long before a crash is on disk.
func (r *RabbitMQ) SyncMetadata(ctx context.Context) error {
	_, err := r.Ctl(ctx, "eval", "mnesia:sync_log().")
	return err
}

// Ctl runs rabbitmqctl against the node (with its cookie) and returns its
// output.
func (r *RabbitMQ) Ctl(ctx context.Context, args ...string) (string, error) {
	_, ctl, err := RabbitMQServerBin()
	if err != nil {
		return "", err
	}
	if ctl == "" {
		return "", errors.New("brokerproc: rabbitmqctl not found next to rabbitmq-server")
	}
	cmd := exec.CommandContext(ctx, ctl, append([]string{"-n", r.Node}, args...)...)
	cmd.Env = append(os.Environ(), r.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("brokerproc: rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
