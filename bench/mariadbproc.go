package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// privateMariaDB is a mariadbd of the harness's own, in a temporary
// directory, on a free port, without grant tables (it listens on
// 127.0.0.1 only and lives for one workload).
type privateMariaDB struct {
	dir string
	cmd *exec.Cmd
	db  *sql.DB
	dsn string
}

func startPrivateMariaDB(ctx context.Context) (*privateMariaDB, error) {
	installDB, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	mariadbd, err := exec.LookPath("mariadbd")
	if err != nil {
		if mariadbd, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "outbox-bench-mariadb-")
	if err != nil {
		return nil, err
	}
	p := &privateMariaDB{dir: dir}
	data := filepath.Join(dir, "data")
	userArgs := []string{}
	if os.Geteuid() == 0 {
		userArgs = []string{"--user=root"}
	}
	install := exec.CommandContext(ctx, installDB, append([]string{"--no-defaults", "--datadir=" + data, "--skip-test-db", "--auth-root-authentication-method=normal"}, userArgs...)...)
	if out, err := install.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mariadb-install-db: %v: %s", err, tail(out))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "mariadbd.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(mariadbd, append([]string{"--no-defaults", "--datadir=" + data,
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--socket=" + filepath.Join(dir, "sock"),
		"--pid-file=" + filepath.Join(dir, "pid"), "--tmpdir=" + dir, "--skip-grant-tables", "--innodb-buffer-pool-size=64M",
		"--skip-log-bin"}, userArgs...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	admin := fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port)
	adb, err := sql.Open("mysql", admin)
	if err != nil {
		p.stop()
		return nil, err
	}
	defer adb.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err = adb.PingContext(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "mariadbd.log"))
			p.stop()
			return nil, fmt.Errorf("the private mariadbd did not answer in 60 s (%v): %s", err, tail(log))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := adb.ExecContext(ctx, "CREATE DATABASE "+mysqlBenchDB); err != nil {
		p.stop()
		return nil, err
	}
	p.dsn = fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s", port, mysqlBenchDB)
	if p.db, err = sql.Open("mysql", p.dsn); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// stop ends the private server (SIGTERM, then SIGKILL after 20 s) and
// removes its directory.
func (p *privateMariaDB) stop() {
	if p.db != nil {
		p.db.Close()
	}
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(p.dir)
}

// tail is the end of a process's output, for an error message.
func tail(b []byte) string {
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return string(b)
}

// cpu is the CPU time (user and system) the private server has used so
// far, from /proc/PID/stat (false when it cannot be read).
func (p *privateMariaDB) cpu() (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * time.Second / clockTick, true
}
