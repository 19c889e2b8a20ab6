package servers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox/chaos/internal/proc"
)

// maxSocketPath is the longest Unix socket path Linux accepts (sun_path
// holds 108 bytes with the NUL).
const maxSocketPath = 107

// MariaDB is a private mariadbd, a child of this process, in its own
// directory DIR: data in DIR/data (made by mariadb-install-db at the
// first start), socket, PID file and temporary files in DIR/run, error
// log DIR/mariadb.log. It listens on 127.0.0.1 only, with the binary log
// off and every commit written and flushed to the redo log before it
// returns (innodb_flush_log_at_trx_commit=1). root@127.0.0.1 has no
// password. Methods are safe for concurrent use.
type MariaDB struct {
	bin, dir, data, run, log string
	port                     int

	mu     sync.Mutex
	p      *proc.Proc
	closed bool
}

// StartMariaDB creates a MariaDB data directory in dir (created if
// missing) with mariadb-install-db unless dir/data already holds one,
// starts mariadbd on a port it picks and returns once the server accepts
// connections (crash recovery done) and answers with this data directory.
// When the process runs as root, mariadbd runs as root too (--user=root),
// so the kernel still kills it when the harness dies.
func StartMariaDB(ctx context.Context, dir string) (*MariaDB, error) {
	bin, err := sbinPath("mariadbd")
	if err != nil {
		return nil, err
	}
	install, err := sbinPath("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("servers: mariadb: %w", err)
	}
	m := &MariaDB{bin: bin, dir: dir, data: filepath.Join(dir, "data"), run: filepath.Join(dir, "run"), log: filepath.Join(dir, "mariadb.log")}
	if len(m.socket()) > maxSocketPath {
		return nil, fmt.Errorf("servers: mariadb: socket path %s is longer than %d bytes; use a shorter directory", m.socket(), maxSocketPath)
	}
	if err := os.MkdirAll(m.run, 0o755); err != nil {
		return nil, fmt.Errorf("servers: mariadb: %w", err)
	}
	if _, err := os.Stat(filepath.Join(m.data, "mysql")); errors.Is(err, os.ErrNotExist) {
		if err := m.install(ctx, install); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		if m.port, err = pickPort(false); err != nil {
			return nil, err
		}
		m.p, err = m.start(ctx)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			return nil, err
		}
	}
}

// sbinPath finds a MariaDB program on PATH or in /usr/sbin and /usr/bin
// (root's PATH has /usr/sbin, other users' often not).
func sbinPath(bin string) (string, error) {
	if p, err := exec.LookPath(bin); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin"} {
		p := filepath.Join(d, bin)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("servers: %s %w: it is neither on PATH nor in /usr/sbin (Debian: apt-get install mariadb-server)", bin, ErrNotInstalled)
}

// common are the options of both mariadb-install-db and mariadbd: the
// files in DIR (temporary files in DIR/run), small InnoDB files (a fast
// install and start).
func (m *MariaDB) common() []string {
	args := []string{
		"--no-defaults",
		"--datadir=" + m.data,
		// Temporary tables of its own: concurrent bootstraps sharing /tmp
		// fail on each other's files.
		"--tmpdir=" + m.run,
		"--innodb-log-file-size=16M",
		"--innodb-buffer-pool-size=32M",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	return args
}

func (m *MariaDB) socket() string { return filepath.Join(m.run, "mysqld.sock") }

// install runs mariadb-install-db: system tables, root@localhost,
// root@127.0.0.1 and root@::1 without a password, no test database.
func (m *MariaDB) install(ctx context.Context, bin string) error {
	args := append(m.common(), "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve")
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = m.dir
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	logPath := filepath.Join(m.dir, "install.log")
	_ = os.WriteFile(logPath, out, 0o644)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("servers: mariadb-install-db: %w", ctx.Err())
		}
		return fmt.Errorf("servers: mariadb-install-db --datadir=%s: %v: %s (log: %s)", m.data, err, installErrors(string(out)), logPath)
	}
	return nil
}

// installErrors picks the lines of mariadb-install-db's output that say
// what went wrong (its last lines are the same advice whatever failed).
func installErrors(out string) string {
	var picked []string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "ERROR") || strings.Contains(line, "[ERROR]") || strings.Contains(line, "FATAL") {
			picked = append(picked, strings.TrimSpace(line))
		}
	}
	if len(picked) == 0 {
		return lastLines(out, 10)
	}
	return strings.Join(picked[:min(5, len(picked))], "; ")
}

// start starts mariadbd and waits until it accepts connections on the
// port and answers with this data directory. Its error log is m.log; its
// standard output and error, which only early failures reach, go to
// DIR/mariadb.out. A port taken by another process is errAddrInUse.
func (m *MariaDB) start(ctx context.Context) (*proc.Proc, error) {
	var from int64
	if st, err := os.Stat(m.log); err == nil {
		from = st.Size()
	}
	args := append(m.common(),
		"--port="+strconv.Itoa(m.port),
		"--bind-address=127.0.0.1",
		"--socket="+m.socket(),
		"--pid-file="+filepath.Join(m.run, "mysqld.pid"),
		"--log-error="+m.log,
		"--skip-log-bin",
		"--skip-name-resolve",
		"--innodb-flush-log-at-trx-commit=1",
		"--max-connections=300",
	)
	name := "mariadbd-" + strconv.Itoa(m.port)
	p, err := proc.Start(name, filepath.Join(m.dir, "mariadb.out"), m.bin, args, nil)
	if err != nil {
		return nil, fmt.Errorf("servers: %w", err)
	}
	failed := func(why error) (*proc.Proc, error) {
		_ = p.Kill()
		logged := readFrom(m.log, from) + tail(p.Log, 5)
		if strings.Contains(logged, "Address already in use") || strings.Contains(logged, "Do you already have another server running on port") {
			return nil, fmt.Errorf("servers: %s: port %d: %w (log: %s)", name, m.port, errAddrInUse, m.log)
		}
		return nil, fmt.Errorf("servers: %s: %w\nlog %s:\n%s", name, why, m.log, lastLines(logged, 10))
	}
	db, err := sql.Open("mysql", m.dsn("")+"?timeout=1s&readTimeout=5s")
	if err != nil {
		return failed(err)
	}
	defer db.Close()
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	var last error
	for {
		select {
		case <-p.Done():
			_, werr := p.Exited()
			return failed(fmt.Errorf("exited while starting: %v", werr))
		case <-ctx.Done():
			return failed(fmt.Errorf("not ready (last: %v): %w", last, ctx.Err()))
		case <-t.C:
		}
		var data string
		if err := db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&data); err != nil {
			last = err
			continue
		}
		if filepath.Clean(data) != m.data {
			// Someone else's server answers on the port; ours will fail
			// to bind (or has): wait for it to exit.
			last = fmt.Errorf("port %d answered with data directory %s, not %s", m.port, data, m.data)
			continue
		}
		return p, nil
	}
}

// URL is the store URL of root on the server, mysql://root@127.0.0.1:PORT/,
// for the outbox CLI; give it a database with mysqlurl.WithDatabase.
func (m *MariaDB) URL() string { return "mysql://root@" + addr(m.port) + "/" }

// DSN is root's go-sql-driver/mysql DSN for database (may be empty).
func (m *MariaDB) DSN(database string) string { return m.dsn(database) }

func (m *MariaDB) dsn(database string) string {
	return "root@tcp(" + addr(m.port) + ")/" + database
}

// Port is the TCP port, the same across restarts.
func (m *MariaDB) Port() int { return m.port }

// Dir is the directory given to StartMariaDB, made absolute.
func (m *MariaDB) Dir() string { return m.dir }

// PID is the running server's process ID.
func (m *MariaDB) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p.PID()
}

// Kill sends SIGKILL and waits until the process is reaped: a crash, with
// no shutdown of InnoDB, so the next Restart recovers from the redo log.
// An error wrapping [proc.ErrExited] if it was not running.
func (m *MariaDB) Kill() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("servers: mariadb: Kill after Close")
	}
	if done, _ := m.p.Exited(); done {
		return fmt.Errorf("servers: mariadbd %s: Kill: %w", addr(m.port), proc.ErrExited)
	}
	return m.p.Kill()
}

// Restart starts the killed (or exited) server again on the same port and
// data directory and returns once it accepts connections, crash recovery
// done. An error if it is running, or if another process has taken the
// port meanwhile.
func (m *MariaDB) Restart(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("servers: mariadb: Restart after Close")
	}
	if done, _ := m.p.Exited(); !done {
		return fmt.Errorf("servers: mariadbd %s: Restart: still running; Kill it first", addr(m.port))
	}
	p, err := m.start(ctx)
	if err != nil {
		return err
	}
	m.p = p
	return nil
}

// Close stops the server if it is running (SIGTERM, a clean shutdown,
// then SIGKILL after 20 s) and removes nothing: the directory stays for
// inspection and is the caller's to remove. Later calls return nil; other
// methods fail after Close.
func (m *MariaDB) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	if done, _ := m.p.Exited(); done {
		return nil
	}
	if err := m.p.Terminate(20 * time.Second); err != nil && !errors.Is(err, proc.ErrExited) {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil // it exited, with a status of its own
		}
		return err
	}
	return nil
}

// Sessions picks the MariaDB sessions [KillConnections] ends: those of
// User on Database (both required), and with Busy only those running a
// statement (COMMAND not Sleep) or holding an open InnoDB transaction.
type Sessions struct {
	User, Database string
	Busy           bool
}

// killPoll is how often KillConnections looks for sessions while within
// lasts, and trxPoll how often it reads information_schema.innodb_trx,
// which InnoDB refreshes only when it was not read in the last 100 ms.
const (
	killPoll = 5 * time.Millisecond
	trxPoll  = 150 * time.Millisecond
)

// KillConnections runs KILL CONNECTION on every session in
// information_schema.processlist that s picks, except the session it
// opens to adminDSN itself, again every 5 ms until within has passed (0:
// once), and returns how many it ended (a session that ended by itself
// meanwhile is not counted). With Busy and a within, it catches sessions
// in the middle of a statement (looked for every 5 ms) or a transaction
// (every 150 ms), which a single pass seldom does: most sessions of a
// pool are idle most of the time.
func KillConnections(ctx context.Context, adminDSN string, s Sessions, within time.Duration) (int, error) {
	if s.User == "" || s.Database == "" {
		return 0, errors.New("servers: KillConnections: give both a user and a database; without them it would end other people's sessions")
	}
	db, err := sql.Open("mysql", adminDSN)
	if err != nil {
		return 0, fmt.Errorf("servers: KillConnections: %w", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("servers: KillConnections: %w", err)
	}
	defer conn.Close()
	q := "SELECT id FROM information_schema.processlist WHERE user = ? AND db = ? AND id <> CONNECTION_ID()"
	busy := q + " AND command <> 'Sleep'"
	inTx := q + " AND (command <> 'Sleep' OR id IN (SELECT trx_mysql_thread_id FROM information_schema.innodb_trx))"
	end := time.Now().Add(within)
	var trxRead time.Time
	n := 0
	for {
		pass := q
		if s.Busy {
			// InnoDB refreshes innodb_trx only when it was not read in the
			// last 0.1 s: read it every trxPoll, the statements every pass.
			pass = busy
			if time.Since(trxRead) >= trxPoll {
				pass, trxRead = inTx, time.Now()
			}
		}
		k, err := killPass(ctx, conn, pass, s)
		n += k
		if err != nil || !time.Now().Before(end) {
			return n, err
		}
		if err := sleepCtx(ctx, killPoll); err != nil {
			return n, fmt.Errorf("servers: KillConnections: %w", err)
		}
	}
}

// killPass kills the sessions query q finds once.
func killPass(ctx context.Context, conn *sql.Conn, q string, s Sessions) (int, error) {
	rows, err := conn.QueryContext(ctx, q, s.User, s.Database)
	if err != nil {
		return 0, fmt.Errorf("servers: KillConnections: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return 0, fmt.Errorf("servers: KillConnections: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("servers: KillConnections: %w", err)
	}
	n := 0
	for _, id := range ids {
		_, err := conn.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
		var me *mysql.MySQLError
		switch {
		case err == nil:
			n++
		case errors.As(err, &me) && me.Number == 1094: // ER_NO_SUCH_THREAD: it ended meanwhile
		default:
			return n, fmt.Errorf("servers: KillConnections: KILL CONNECTION %d: %w", id, err)
		}
	}
	return n, nil
}
