package app

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// privateMariaDB starts a mariadbd of the test's own (a data directory
// made by mariadb-install-db, a free port of 127.0.0.1) with the extra
// server options given, and stops it (by its PID) when the test ends. It
// returns the port; root has no password and may connect from 127.0.0.1.
func privateMariaDB(t *testing.T, opts ...string) int {
	t.Helper()
	install, err1 := exec.LookPath("mariadb-install-db")
	server, err2 := lookPathOrSbin("mariadbd")
	if err1 != nil || err2 != nil {
		if testenv.Required() {
			t.Fatalf("mariadb-install-db or mariadbd is not installed: %v %v", err1, err2)
		}
		t.Skipf("mariadb-install-db or mariadbd is not installed (%v %v): apt-get install mariadb-server", err1, err2)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	user := "--user=" + os.Getenv("USER")
	if os.Geteuid() == 0 {
		user = "--user=root"
	}
	out, err := exec.Command(install, "--no-defaults", "--datadir="+data, "--auth-root-authentication-method=normal", "--skip-test-db", user).CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	port := freePort(t)
	args := append([]string{"--no-defaults", "--datadir=" + data, fmt.Sprintf("--port=%d", port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(dir, "sock"), "--pid-file=" + filepath.Join(dir, "pid"), user,
		"--innodb-buffer-pool-size=16M", "--skip-log-bin"}, opts...)
	var logs bytes.Buffer
	cmd := exec.Command(server, args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for deadline := time.Now().Add(60 * time.Second); ; { // watchdog
		select {
		case <-exited:
			t.Fatalf("mariadbd exited:\n%s", logs.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return port
		}
		if time.Now().After(deadline) {
			t.Fatalf("mariadbd did not answer in a minute: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lookPathOrSbin finds a server binary on PATH or in /usr/sbin.
func lookPathOrSbin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return exec.LookPath(filepath.Join("/usr/sbin", name))
}

// TestMySQLTLS: against a MariaDB with a certificate of the test's CA,
// each sslmode does what 'outbox help stores' says: verify-full verifies
// the chain and the name, verify-ca the chain only, require and the
// default preferred encrypt without verifying; a client certificate
// (sslcert, sslkey) authenticates a user that requires one; each failure
// names the parameter that fixes it, and no output shows the password.
func TestMySQLTLS(t *testing.T) {
	t.Parallel()
	pki := clitest.NewPKI(t)
	port := privateMariaDB(t, "--ssl-cert="+pki.CertFile, "--ssl-key="+pki.KeyFile, "--ssl-ca="+pki.CAFile)
	root, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	const pw = "Tls/Secret@Pw-5"
	for _, q := range []string{
		"CREATE DATABASE app",
		"CREATE USER 'app'@'%' IDENTIFIED BY '" + pw + "' REQUIRE SSL",
		"CREATE USER 'certified'@'%' REQUIRE X509",
		"GRANT ALL ON app.* TO 'app'@'%'",
		"GRANT ALL ON app.* TO 'certified'@'%'",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	store := func(user, host, query string) string {
		return fmt.Sprintf("mysql://%s@%s:%d/app?%s", user, host, port, query)
	}
	app := "app:" + strings.NewReplacer("/", "%2F", "@", "%40").Replace(pw)
	check := func(r cliResult) cliResult {
		t.Helper()
		for _, s := range []string{pw, "Tls%2FSecret"} {
			if strings.Contains(r.stdout+r.stderr, s) {
				t.Fatalf("the output shows the password:\n%v", r)
			}
		}
		return r
	}
	ca := "sslrootcert=" + pki.CAFile
	if got := check(runCLI(t, "migrate", "up", "--partitions", "2", "--store", store(app, "127.0.0.1", "sslmode=verify-full&"+ca))); got.code != 0 || !strings.Contains(got.stdout, "created `outbox`") {
		t.Fatalf("migrate up over verify-full TLS:\n%v", got)
	}
	for _, q := range []string{"sslmode=verify-ca&" + ca, "sslmode=require", "sslmode=preferred", ""} {
		if r := check(runCLI(t, "status", "--store", store(app, "127.0.0.1", q))); r.code != 0 || !strings.Contains(r.stdout, "2 partitions") {
			t.Fatalf("status with %q:\n%v", q, r)
		}
	}
	// verify-ca checks the chain only: another name than the certificate's
	// passes it, and fails verify-full.
	if r := check(runCLI(t, "status", "--store", store(app, "localhost", "sslmode=verify-ca&"+ca))); r.code != 0 {
		t.Fatalf("verify-ca by another name:\n%v", r)
	}
	check(cliFails(t, 1, []string{"not valid for the name dialled", "sslmode=verify-ca"}, "status", "--store", store(app, "localhost", "sslmode=verify-full&"+ca)))
	check(cliFails(t, 1, []string{"not signed by a trusted CA", "sslrootcert=FILE"}, "status", "--store", store(app, "127.0.0.1", "sslmode=verify-full")))
	check(cliFails(t, 1, []string{"not signed by a trusted CA", "sslrootcert=FILE"}, "status", "--store", store(app, "127.0.0.1", "sslmode=verify-ca")))
	check(cliFails(t, 1, []string{`rejected user "app" or its password (1045`}, "status", "--store", store(app, "127.0.0.1", "sslmode=disable")))
	// Mutual TLS.
	mutual := fmt.Sprintf("sslmode=verify-full&%s&sslcert=%s&sslkey=%s", ca, pki.ClientCertFile, pki.ClientKeyFile)
	if r := runCLI(t, "status", "--store", store("certified", "127.0.0.1", mutual)); r.code != 0 || !strings.Contains(r.stdout, "2 partitions") {
		t.Fatalf("status with a client certificate:\n%v", r)
	}
	cliFails(t, 1, []string{`rejected user "certified" or its password (1045`}, "status", "--store", store("certified", "127.0.0.1", "sslmode=verify-full&"+ca))
}
