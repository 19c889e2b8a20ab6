package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outbox/chaos/internal/proc"
)

// clusterPoll is how often cluster state is polled while waiting.
const clusterPoll = 100 * time.Millisecond

// refailover is how long FailoverForce waits for a promotion before it
// sends CLUSTER FAILOVER FORCE again (a manual failover is not retried by
// the replica itself).
const refailover = 5 * time.Second

// RedisCluster is a private Redis Cluster: redis-server children in
// DIR/node-N, on 127.0.0.1 ports whose cluster bus ports (port+10000) were
// free too. Nodes run with cluster-node-timeout 1000 ms, so a killed
// master is failed over within a few seconds, and with
// cluster-replica-validity-factor 0, so any replica may take over; no
// persistence (appendonly no, no RDB snapshots), diskless replication
// without delay, no replica migration. Methods are safe for concurrent
// use.
type RedisCluster struct {
	bin, cli, dir string
	nodes         []*clusterNode

	mu     sync.Mutex
	closed bool
}

type clusterNode struct {
	addr string
	port int
	dir  string
	p    *proc.Proc // guarded by RedisCluster.mu
}

// StartRedisCluster starts masters*(1+replicasPerMaster) nodes in dir
// (created if missing), creates the cluster with redis-cli --cluster
// create, and returns once it is healthy (see WaitHealthy). masters must
// be at least 3 (redis-cli's minimum), replicasPerMaster at least 0.
func StartRedisCluster(ctx context.Context, dir string, masters, replicasPerMaster int) (*RedisCluster, error) {
	if masters < 3 || replicasPerMaster < 0 {
		return nil, fmt.Errorf("servers: redis cluster: %d masters with %d replicas each: want at least 3 masters and no negative replicas", masters, replicasPerMaster)
	}
	bin, err := lookPath("redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	cli, err := lookPath("redis-cli", "redis-tools")
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("servers: redis cluster: %w", err)
	}
	c := &RedisCluster{bin: bin, cli: cli, dir: dir}
	ok := false
	defer func() {
		if !ok {
			_ = c.Close()
		}
	}()
	for i := range masters * (1 + replicasPerMaster) {
		n := &clusterNode{dir: filepath.Join(dir, "node-"+strconv.Itoa(i))}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, fmt.Errorf("servers: redis cluster: %w", err)
		}
		for attempt := 1; ; attempt++ {
			if n.port, err = pickPort(true); err != nil {
				return nil, err
			}
			n.addr = addr(n.port)
			n.p, err = startRedisServer(ctx, bin, n.dir, n.port, clusterArgs)
			if err == nil {
				break
			}
			if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
				return nil, err
			}
		}
		c.mu.Lock()
		c.nodes = append(c.nodes, n)
		c.mu.Unlock()
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("servers: redis cluster: redis-cli %s: %v: %s", strings.Join(args, " "), err, lastLines(string(out), 10))
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	got, err := c.Masters(ctx)
	if err != nil {
		return nil, err
	}
	if len(got) != masters {
		return nil, fmt.Errorf("servers: redis cluster: created with %d masters (%v), want %d", len(got), got, masters)
	}
	ok = true
	return c, nil
}

var clusterArgs = []string{
	"--cluster-enabled", "yes",
	"--cluster-config-file", "nodes.conf", // in the node's --dir
	"--cluster-node-timeout", "1000",
	"--cluster-replica-validity-factor", "0",
	"--cluster-allow-replica-migration", "no",
	"--appendonly", "no",
	"--repl-diskless-sync-delay", "0",
}

// Addrs is every node's 127.0.0.1:PORT, masters and replicas, in start
// order, whether running or not.
func (c *RedisCluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// Dir is the directory given to StartRedisCluster, made absolute.
func (c *RedisCluster) Dir() string { return c.dir }

// running is the nodes whose processes are running, in start order.
func (c *RedisCluster) running() []*clusterNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var r []*clusterNode
	for _, n := range c.nodes {
		if done, _ := n.p.Exited(); !done {
			r = append(r, n)
		}
	}
	return r
}

func (c *RedisCluster) node(addr string) (*clusterNode, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("servers: redis cluster: used after Close")
	}
	for _, n := range c.nodes {
		if n.addr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("servers: redis cluster: %s is not one of its nodes", addr)
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id, addr, master string
	flags            []string
	slots            []string
}

func (l nodeLine) has(flag string) bool { return slices.Contains(l.flags, flag) }

// serving reports whether l is a master holding slots that is not
// flagged as failed.
func (l nodeLine) serving() bool { return l.has("master") && !l.has("fail") && len(l.slots) > 0 }

func parseNodes(s string) []nodeLine {
	var ls []nodeLine
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		a, _, _ := strings.Cut(f[1], "@")
		l := nodeLine{id: f[0], addr: a, master: f[3], flags: strings.Split(f[2], ",")}
		for _, s := range f[8:] {
			if !strings.HasPrefix(s, "[") { // skip migrating/importing slots
				l.slots = append(l.slots, s)
			}
		}
		ls = append(ls, l)
	}
	return ls
}

// view is CLUSTER NODES as the node at addr sees it.
func view(ctx context.Context, addr string) ([]nodeLine, error) {
	rc := newClient(addr)
	defer rc.Close()
	s, err := rc.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("servers: redis cluster: CLUSTER NODES on %s: %w", addr, err)
	}
	return parseNodes(s), nil
}

// Masters is the addresses of the masters serving slots, not flagged as
// failed, as the first running node that answers sees them, sorted.
func (c *RedisCluster) Masters(ctx context.Context) ([]string, error) {
	var errs []error
	for _, n := range c.running() {
		v, err := view(ctx, n.addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var m []string
		for _, l := range v {
			if l.serving() {
				m = append(m, l.addr)
			}
		}
		slices.Sort(m)
		return m, nil
	}
	if len(errs) == 0 {
		return nil, errors.New("servers: redis cluster: no node is running")
	}
	return nil, errors.Join(errs...)
}

// FailoverForce sends CLUSTER FAILOVER FORCE to a running replica of
// masterAddr (the first by address) and returns the replica's address
// once every running node sees it as a master and the cluster is healthy
// (see WaitHealthy), the old master a replica in sync, if it runs. Bound
// it with ctx: it waits until then.
func (c *RedisCluster) FailoverForce(ctx context.Context, masterAddr string) (string, error) {
	return c.failover(ctx, masterAddr, true)
}

// Failover sends CLUSTER FAILOVER (without FORCE: the coordinated manual
// failover of planned maintenance) to a running replica of masterAddr:
// the master stops accepting writes, the replica catches up with its
// replication stream and only then takes over, so no acknowledged write
// is lost. It returns as FailoverForce does.
func (c *RedisCluster) Failover(ctx context.Context, masterAddr string) (string, error) {
	return c.failover(ctx, masterAddr, false)
}

func (c *RedisCluster) failover(ctx context.Context, masterAddr string, force bool) (string, error) {
	if _, err := c.node(masterAddr); err != nil {
		return "", err
	}
	replica, err := c.healthyReplica(ctx, masterAddr)
	if err != nil {
		return "", err
	}
	if err := sendFailover(ctx, replica, force); err != nil {
		return "", err
	}
	return c.awaitFailover(ctx, masterAddr, replica, force)
}

// healthyReplica returns the first by address of the running replicas
// that masterAddr sees as healthy. A loaded machine can have a node
// briefly flag a replica as failing (the node timeout is 1s): it looks
// for one for 10 seconds before it gives up.
func (c *RedisCluster) healthyReplica(ctx context.Context, masterAddr string) (string, error) {
	for wait := time.Now().Add(10 * time.Second); ; {
		replicas, err := c.healthyReplicas(ctx, masterAddr)
		if err != nil {
			return "", err
		}
		if len(replicas) > 0 {
			slices.Sort(replicas)
			return replicas[0], nil
		}
		if time.Now().After(wait) {
			return "", fmt.Errorf("servers: redis cluster: failover: %s has no running, healthy replica", masterAddr)
		}
		if err := sleepCtx(ctx, clusterPoll); err != nil {
			return "", err
		}
	}
}

// healthyReplicas returns the addresses of the running nodes that the
// master at masterAddr sees as its replicas, not flagged as failing. An
// error if masterAddr is not a master.
func (c *RedisCluster) healthyReplicas(ctx context.Context, masterAddr string) ([]string, error) {
	v, err := view(ctx, masterAddr)
	if err != nil {
		return nil, err
	}
	var id string
	for _, l := range v {
		if l.has("myself") {
			if !l.has("master") {
				return nil, fmt.Errorf("servers: redis cluster: failover: %s is not a master (flags %s)", masterAddr, strings.Join(l.flags, ","))
			}
			id = l.id
		}
	}
	run := map[string]bool{}
	for _, n := range c.running() {
		run[n.addr] = true
	}
	var replicas []string
	for _, l := range v {
		if l.master == id && l.has("slave") && !l.has("fail") && !l.has("fail?") && run[l.addr] {
			replicas = append(replicas, l.addr)
		}
	}
	return replicas, nil
}

// sendFailover sends CLUSTER FAILOVER, with FORCE when force is set, to
// the node at the address replica.
func sendFailover(ctx context.Context, replica string, force bool) error {
	rc := newClient(replica)
	defer rc.Close()
	args := []any{"CLUSTER", "FAILOVER"}
	if force {
		args = append(args, "FORCE")
	}
	if err := rc.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("servers: redis cluster: %v on %s: %w", args, replica, err)
	}
	return nil
}

// awaitFailover returns replica once every running node sees it as a
// serving master and the cluster is healthy, the failover having just
// been sent to it. While it is not promoted and does not say it is a
// master, it sends the failover again every refailover. It waits until
// ctx ends, then returns what was still wrong.
func (c *RedisCluster) awaitFailover(ctx context.Context, masterAddr, replica string, force bool) (string, error) {
	sent := time.Now()
	t := time.NewTicker(clusterPoll)
	defer t.Stop()
	last := errors.New("not polled yet")
	for {
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("servers: redis cluster: FailoverForce %s to %s: %v: %w", masterAddr, replica, last, ctx.Err())
		case <-t.C:
		}
		if last = c.promoted(ctx, replica); last == nil {
			if last = c.healthy(ctx); last == nil {
				return replica, nil
			}
			continue
		}
		if time.Since(sent) > refailover && !c.selfMaster(ctx, replica) {
			if err := sendFailover(ctx, replica, force); err != nil {
				return "", err
			}
			sent = time.Now()
		}
	}
}

// promoted is nil when every running node sees addr as a serving master.
func (c *RedisCluster) promoted(ctx context.Context, addr string) error {
	for _, n := range c.running() {
		v, err := view(ctx, n.addr)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(v, func(l nodeLine) bool { return l.addr == addr })
		if i < 0 || !v[i].serving() {
			return fmt.Errorf("%s does not see %s as a serving master yet", n.addr, addr)
		}
	}
	return nil
}

// selfMaster reports whether the node at addr says it is a master.
func (c *RedisCluster) selfMaster(ctx context.Context, addr string) bool {
	v, err := view(ctx, addr)
	if err != nil {
		return false
	}
	i := slices.IndexFunc(v, func(l nodeLine) bool { return l.has("myself") })
	return i >= 0 && v[i].has("master")
}

// KillNode sends SIGKILL to the node at addr and waits until it is
// reaped. An error wrapping [proc.ErrExited] if it was not running.
func (c *RedisCluster) KillNode(addr string) error {
	n, err := c.node(addr)
	if err != nil {
		return err
	}
	c.mu.Lock()
	p := n.p
	c.mu.Unlock()
	if done, _ := p.Exited(); done {
		return fmt.Errorf("servers: redis cluster: KillNode %s: %w", addr, proc.ErrExited)
	}
	return p.Kill()
}

// RestartNode starts the killed (or exited) node at addr again with its
// port, directory and nodes.conf, and returns once it answers PING. It
// rejoins the cluster on its own, as a replica if it was failed over
// meanwhile; WaitHealthy waits for that. An error if it is running.
func (c *RedisCluster) RestartNode(ctx context.Context, addr string) error {
	n, err := c.node(addr)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if done, _ := n.p.Exited(); !done {
		return fmt.Errorf("servers: redis cluster: RestartNode %s: still running; KillNode it first", addr)
	}
	p, err := startRedisServer(ctx, c.bin, n.dir, n.port, clusterArgs)
	if err != nil {
		return err
	}
	n.p = p
	return nil
}

// WaitHealthy returns once the running nodes agree the cluster is whole:
// each says cluster_state:ok with all 16384 slots assigned and ok and
// knows every node; each sees the same masters serving the same slots,
// all of them running nodes; and each running replica's link to its
// master is up. Killed nodes are left out, so after a master's kill it
// returns once its replica took over. It waits until ctx ends, then
// returns what was still wrong.
func (c *RedisCluster) WaitHealthy(ctx context.Context) error {
	t := time.NewTicker(clusterPoll)
	defer t.Stop()
	var before error // the last thing found wrong before ctx ended
	for {
		last := c.healthy(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if before != nil && errors.Is(last, ctx.Err()) {
				// The last check was cut short by ctx: say what was wrong
				// before it.
				last = before
			}
			return fmt.Errorf("servers: redis cluster: not healthy: %v: %w", last, ctx.Err())
		case <-t.C:
		}
		before = last
	}
}

// healthy is nil when the cluster is healthy (see WaitHealthy), else what
// is wrong.
func (c *RedisCluster) healthy(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("closed")
	}
	total := len(c.nodes)
	c.mu.Unlock()
	nodes := c.running()
	if len(nodes) == 0 {
		return errors.New("no node is running")
	}
	run := map[string]bool{}
	for _, n := range nodes {
		run[n.addr] = true
	}
	var first string
	for _, n := range nodes {
		if err := nodeHealthy(ctx, n.addr, total, run, &first); err != nil {
			return err
		}
	}
	return nil
}

// nodeHealthy checks one node; first is the first node's slot map, set by
// the first call, which later nodes must match.
func nodeHealthy(ctx context.Context, addr string, total int, run map[string]bool, first *string) error {
	rc := newClient(addr)
	defer rc.Close()
	info, err := rc.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER INFO on %s: %w", addr, err)
	}
	for _, kv := range [][2]string{
		{"cluster_state", "ok"},
		{"cluster_slots_assigned", "16384"},
		{"cluster_slots_ok", "16384"},
		{"cluster_known_nodes", strconv.Itoa(total)},
	} {
		if got := infoField(info, kv[0]); got != kv[1] {
			return fmt.Errorf("%s says %s:%s, want %s", addr, kv[0], got, kv[1])
		}
	}
	s, err := rc.ClusterNodes(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	var slots []string
	replica := false
	for _, l := range parseNodes(s) {
		if l.has("myself") && l.has("slave") {
			replica = true
		}
		if l.has("master") && len(l.slots) > 0 {
			if !l.serving() || !run[l.addr] {
				return fmt.Errorf("%s sees slots %v on %s, which is failed or not running", addr, l.slots, l.addr)
			}
			slots = append(slots, l.addr+" "+strings.Join(l.slots, " "))
		}
	}
	slices.Sort(slots)
	m := strings.Join(slots, "; ")
	if *first == "" {
		*first = m
	} else if m != *first {
		return fmt.Errorf("%s sees the slots as %s, another node as %s", addr, m, *first)
	}
	if replica {
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", addr, err)
		}
		if got := infoField(info, "master_link_status"); got != "up" {
			return fmt.Errorf("replica %s says master_link_status:%s", addr, got)
		}
	}
	return nil
}

// Close kills every node this cluster started and removes nothing: the
// directory stays for inspection and is the caller's to remove. Later
// calls return nil; other methods fail after Close.
func (c *RedisCluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.p.Kill())
	}
	return errors.Join(errs...)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
