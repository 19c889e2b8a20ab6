package servers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCtlTimeout bounds pg_ctl's wait for a start or a stop (its -t), and
// Close's stop.
const pgCtlTimeout = 60 * time.Second

// Postgres is a private PostgreSQL server in its own directory DIR: data
// in DIR/data, its Unix socket in DIR/sock, its log in DIR/postgres.log,
// TCP on 127.0.0.1. Methods are safe for concurrent use; they run one at
// a time.
type Postgres struct {
	dir, data, sock, log string
	bindir               string
	owner                *user.User // the postgres OS user when running as root, else nil

	mu     sync.Mutex
	port   int
	closed bool
}

// StartPostgres creates a cluster in dir/data with initdb (superuser
// postgres, trust authentication, UTF8, no locale, --no-sync) and starts
// it: fsync on, max_connections 200, shared_buffers 32MB, listening on
// 127.0.0.1 on a port it picks, its settings in dir/data/chaos.conf. It
// returns once the server accepts connections. dir is created if missing;
// dir/data must not exist or be empty. As root see the package doc.
func StartPostgres(ctx context.Context, dir string) (*Postgres, error) {
	bindir, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("servers: postgres: %w", err)
	}
	pg := &Postgres{
		dir:    dir,
		data:   filepath.Join(dir, "data"),
		sock:   filepath.Join(dir, "sock"),
		log:    filepath.Join(dir, "postgres.log"),
		bindir: bindir,
	}
	if err := pg.prepare(); err != nil {
		return nil, err
	}
	if err := pg.run(ctx, "initdb", "-D", pg.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
		"--no-locale", "--no-sync", "--no-instructions"); err != nil {
		return nil, err
	}
	conf := filepath.Join(pg.data, "postgresql.conf")
	if err := appendFile(conf, "\n# Written by the chaos harness (package servers).\ninclude 'chaos.conf'\n"); err != nil {
		return nil, fmt.Errorf("servers: postgres: %w", err)
	}
	for attempt := 1; ; attempt++ {
		if pg.port, err = pickPort(false); err != nil {
			return nil, err
		}
		if err := pg.writeConf(); err != nil {
			return nil, err
		}
		err = pg.start(ctx)
		if err == nil {
			return pg, nil
		}
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			_ = pg.Close() // stops a server that started but failed its check
			return nil, err
		}
	}
}

// prepare creates the directories and the log file and, as root, hands
// them to the postgres user after checking it can reach them.
func (pg *Postgres) prepare() error {
	if err := os.MkdirAll(pg.dir, 0o755); err != nil {
		return fmt.Errorf("servers: postgres: %w", err)
	}
	for _, d := range []string{pg.data, pg.sock} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("servers: postgres: %w", err)
		}
	}
	f, err := os.OpenFile(pg.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("servers: postgres: %w", err)
	}
	_ = f.Close()
	if os.Geteuid() != 0 {
		return nil
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		return fmt.Errorf("servers: postgres: runuser %w: it runs initdb and pg_ctl as the postgres user, which root needs (Debian: apt-get install util-linux)", ErrNotInstalled)
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("servers: postgres: running as root, initdb and pg_ctl must run as the postgres OS user: %v (Debian: apt-get install postgresql creates it)", err)
	}
	pg.owner = u
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for d := pg.dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("servers: postgres: %w", err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("servers: postgres: %s (mode %v) is not traversable by the postgres user; chmod o+x it, or use a directory whose every parent is (t.TempDir's parent is 0700)", d, st.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	for _, p := range []string{pg.data, pg.sock, pg.log} {
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("servers: postgres: %w", err)
		}
	}
	return nil
}

// writeConf writes dir/data/chaos.conf, included by postgresql.conf.
func (pg *Postgres) writeConf() error {
	conf := fmt.Sprintf(`# Written by the chaos harness (package servers); rewritten on each start.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 200
shared_buffers = 32MB
`, pg.port, strings.ReplaceAll(pg.sock, "'", "''"))
	path := filepath.Join(pg.data, "chaos.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("servers: postgres: %w", err)
	}
	return pg.chown(path)
}

func (pg *Postgres) chown(path string) error {
	if pg.owner == nil {
		return nil
	}
	uid, _ := strconv.Atoi(pg.owner.Uid)
	gid, _ := strconv.Atoi(pg.owner.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("servers: postgres: %w", err)
	}
	return nil
}

// run runs one of PostgreSQL's programs to completion, as the postgres
// user when the process is root.
func (pg *Postgres) run(ctx context.Context, prog string, args ...string) error {
	_, err := pg.runStatus(ctx, prog, args...)
	return err
}

// runStatus is run returning the exit code too (-1 when it did not exit).
func (pg *Postgres) runStatus(ctx context.Context, prog string, args ...string) (int, error) {
	bin := filepath.Join(pg.bindir, prog)
	var cmd *exec.Cmd
	if pg.owner != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", pg.owner.Username, "--", bin}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, bin, args...)
	}
	cmd.Dir = pg.dir
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		code := -1
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		if ctx.Err() != nil {
			return code, fmt.Errorf("servers: postgres: %s %s: %w", prog, strings.Join(args, " "), ctx.Err())
		}
		return code, fmt.Errorf("servers: postgres: %s %s: %v: %s", prog, strings.Join(args, " "), err, lastLines(string(out), 10))
	}
	return 0, nil
}

// start runs pg_ctl start, which waits until the server accepts
// connections (after any crash recovery), then checks that the server on
// the port is this one. A port taken by another process is errAddrInUse.
func (pg *Postgres) start(ctx context.Context) error {
	var from int64
	if st, err := os.Stat(pg.log); err == nil {
		from = st.Size()
	}
	err := pg.run(ctx, "pg_ctl", "-D", pg.data, "-l", pg.log, "-w", "-t", strconv.Itoa(int(pgCtlTimeout/time.Second)), "start")
	if err != nil {
		logged := readFrom(pg.log, from)
		if strings.Contains(logged, "Address already in use") {
			return fmt.Errorf("servers: postgres: port %d: %w (log: %s)", pg.port, errAddrInUse, pg.log)
		}
		return fmt.Errorf("%w\nlog %s:\n%s", err, pg.log, lastLines(logged, 10))
	}
	return pg.check(ctx)
}

// check connects and compares the server's data directory with ours.
func (pg *Postgres) check(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, pg.url())
	if err != nil {
		return fmt.Errorf("servers: postgres: started but not accepting connections on port %d: %w (log: %s)", pg.port, err, pg.log)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var data string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&data); err != nil {
		return fmt.Errorf("servers: postgres: %w", err)
	}
	if data != pg.data {
		return fmt.Errorf("servers: postgres: port %d answers with data directory %s, not %s: %w", pg.port, data, pg.data, errAddrInUse)
	}
	return nil
}

func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// URL is the superuser's connection URL,
// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (pg *Postgres) URL() string {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.url()
}

func (pg *Postgres) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
}

// Port is the TCP port, the same across restarts.
func (pg *Postgres) Port() int {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.port
}

// Dir is the directory given to StartPostgres, made absolute.
func (pg *Postgres) Dir() string { return pg.dir }

// StopImmediate crashes the server: pg_ctl stop -m immediate, which ends
// every backend at once with no checkpoint, so the next Start recovers
// from the WAL. It waits until the server is gone; an error if it was not
// running.
func (pg *Postgres) StopImmediate(ctx context.Context) error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.closed {
		return errors.New("servers: postgres: StopImmediate after Close")
	}
	return pg.run(ctx, "pg_ctl", "-D", pg.data, "-m", "immediate", "-w", "-t", strconv.Itoa(int(pgCtlTimeout/time.Second)), "stop")
}

// Start starts the stopped server again on the same port and data
// directory and returns once it accepts connections, crash recovery (WAL
// replay) done. An error if it is running, or if another process has
// taken the port meanwhile.
func (pg *Postgres) Start(ctx context.Context) error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.closed {
		return errors.New("servers: postgres: Start after Close")
	}
	return pg.start(ctx)
}

// Close stops the server if it is running (pg_ctl stop -m fast, else
// immediate) and removes nothing: the directory stays for inspection and
// is the caller's to remove. Later calls return nil; other methods fail
// after Close.
func (pg *Postgres) Close() error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.closed {
		return nil
	}
	pg.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), pgCtlTimeout+10*time.Second)
	defer cancel()
	code, err := pg.runStatus(ctx, "pg_ctl", "-D", pg.data, "status")
	if code == 3 { // not running
		return nil
	}
	if err != nil && code != 0 {
		return err
	}
	t := strconv.Itoa(int(pgCtlTimeout / time.Second))
	if err := pg.run(ctx, "pg_ctl", "-D", pg.data, "-m", "fast", "-w", "-t", t, "stop"); err != nil {
		if err2 := pg.run(ctx, "pg_ctl", "-D", pg.data, "-m", "immediate", "-w", "-t", t, "stop"); err2 != nil {
			return errors.Join(err, err2)
		}
	}
	return nil
}

// TerminateBackends ends, with pg_terminate_backend, every backend in
// pg_stat_activity whose application_name starts with appNamePrefix,
// except the connection it opens to adminURL itself, and returns how many
// it signalled. An empty prefix is refused: it would end every session,
// other people's included.
func TerminateBackends(ctx context.Context, adminURL, appNamePrefix string) (int, error) {
	if appNamePrefix == "" {
		return 0, errors.New("servers: TerminateBackends: empty application_name prefix would end every session; give the prefix your clients set")
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return 0, fmt.Errorf("servers: TerminateBackends: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT pg_terminate_backend(pid) AS ended
			FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND starts_with(application_name, $1)
		) t WHERE ended`, appNamePrefix).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("servers: TerminateBackends: %w", err)
	}
	return n, nil
}
