package cli

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"
)

// TestParseMySQLURL: a mysql:// URL becomes the driver's Config field by
// field: user, password, address with the default port, database,
// driver parameters, session variables and TLS by sslmode.
func TestParseMySQLURL(t *testing.T) {
	t.Parallel()
	tg, err := ParseStore("mysql://app:p%40ss%3Aw0rd@db.internal/orders?timeout=5s&readTimeout=30s&writeTimeout=31s&charset=utf8mb4&collation=utf8mb4_bin&innodb_lock_wait_timeout=10&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	checkFullMySQLURL(t, tg)
	checkMySQLTLSModes(t)
}

// checkFullMySQLURL checks TestParseMySQLURL's URL with every part.
func checkFullMySQLURL(t *testing.T, tg *StoreTarget) {
	t.Helper()
	c := tg.my
	switch {
	case tg.Kind != "mysql":
		t.Errorf("Kind %q, want mysql", tg.Kind)
	case c.User != "app" || c.Passwd != "p@ss:w0rd":
		t.Errorf("user %q password %q, want app and the decoded password", c.User, c.Passwd)
	case c.Net != "tcp" || c.Addr != "db.internal:3306":
		t.Errorf("address %s %s, want tcp db.internal:3306", c.Net, c.Addr)
	case c.DBName != "orders":
		t.Errorf("database %q, want orders", c.DBName)
	case c.Timeout != 5*time.Second || c.ReadTimeout != 30*time.Second || c.WriteTimeout != 31*time.Second:
		t.Errorf("timeouts %v %v %v", c.Timeout, c.ReadTimeout, c.WriteTimeout)
	case c.Collation != "utf8mb4_bin":
		t.Errorf("collation %q", c.Collation)
	case c.Params["innodb_lock_wait_timeout"] != "10" || len(c.Params) != 1:
		t.Errorf("session variables %v, want innodb_lock_wait_timeout=10 only", c.Params)
	case c.TLS != nil:
		t.Errorf("sslmode=disable set up TLS")
	case strings.Contains(tg.Where, "w0rd") || !strings.Contains(tg.Where, "app:xxxxx@db.internal"):
		t.Errorf("Where %q shows the password or not the user", tg.Where)
	}
}

// checkMySQLTLSModes: each sslmode gives its TLS configuration.
func checkMySQLTLSModes(t *testing.T) {
	t.Helper()
	for _, tc := range []struct {
		url      string
		addr     string
		verify   bool // the certificate is verified (by the library or verifyChain)
		fallback bool
		name     string
	}{
		{"mysql://u@h/db", "h:3306", false, true, ""},
		{"mariadb://u@h:3307/db?sslmode=preferred", "h:3307", false, true, ""},
		{"mysql://u@[::1]:3308/db?sslmode=prefer", "[::1]:3308", false, true, ""},
		{"mysql://u@h/db?sslmode=require", "h:3306", false, false, ""},
		{"mysql://u@h/db?sslmode=verify-ca", "h:3306", true, false, ""},
		{"mysql://u@h/db?sslmode=verify-full", "h:3306", true, false, "h"},
	} {
		tg, err := ParseStore(tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		c := tg.my
		if c.Addr != tc.addr || c.TLS == nil || c.AllowFallbackToPlaintext != tc.fallback || c.TLS.ServerName != tc.name {
			t.Errorf("%s: addr %s, TLS %v, fallback %v; want %s, TLS, fallback %v, server name %q", tc.url, c.Addr, c.TLS != nil, c.AllowFallbackToPlaintext, tc.addr, tc.fallback, tc.name)
			continue
		}
		verifies := !c.TLS.InsecureSkipVerify || c.TLS.VerifyPeerCertificate != nil
		if verifies != tc.verify || c.TLS.MinVersion != tls.VersionTLS12 {
			t.Errorf("%s: verifies the certificate %v, want %v (min version %x)", tc.url, verifies, tc.verify, c.TLS.MinVersion)
		}
	}
}

// TestParseMySQLURLErrors: every bad mysql:// URL is refused with the
// fix, and no message shows the password.
func TestParseMySQLURLErrors(t *testing.T) {
	t.Parallel()
	const pw = "S3cret-Pw-9"
	for _, tc := range []struct{ url, want string }{
		{"mysql://app:" + pw + "@h:3306", "names no database: write mysql://USER:PASSWORD@h:3306/DATABASE"},
		{"mysql://app:" + pw + "@h:3306/", "names no database"},
		{"mysql://app:" + pw + "@h/db/outbox", "names more than a database"},
		{"mysql://:" + pw + "@h/db", "names no user"},
		{"mysql://h/db", "names no user"},
		{"mysql://app:" + pw + "@/db", "names no host"},
		{"mysql://app:" + pw + "@h1,h2/db", "names one server"},
		{"mysql://app:" + pw + "@h:99999/db", "bad port"},
		{"mysql://app:" + pw + "@h:x/db", "does not parse"},
		{"mysql://app:" + pw + "@h/db?sslmode=verify", `sslmode="verify": write sslmode=disable, preferred, require, verify-ca or verify-full`},
		{"mysql://app:" + pw + "@h/db?sslmode=disable&sslrootcert=/ca.pem", "sslrootcert= sets up TLS, but sslmode=disable"},
		{"mysql://app:" + pw + "@h/db?sslrootcert=/nonexistent/ca.pem", "sslrootcert: open /nonexistent/ca.pem"},
		{"mysql://app:" + pw + "@h/db?sslcert=/c.pem", "sslcert and sslkey go together"},
		{"mysql://app:" + pw + "@h/db?tls=true", "tls= is not accepted: set TLS with sslmode="},
		{"mysql://app:" + pw + "@h/db?multiStatements=true", "multiStatements= is not accepted"},
		{"mysql://app:" + pw + "@h/db?allowAllFiles=true", "allowAllFiles= is not accepted"},
		{"mysql://app:" + pw + "@h/db?password=" + pw, "password= is not accepted"},
		{"mysql://app:" + pw + "@h/db?timeout=5", `timeout="5": give a duration`},
		{"mysql://app:" + pw + "@h/db?compress=maybe", `compress="maybe": write compress=true`},
		{"mysql://app:" + pw + "@h/db?maxAllowedPacket=-1", "maxAllowedPacket"},
		{"mysql://app:" + pw + "@h/db?a%60b=1", "neither a driver parameter nor a system variable"},
		{"mysql://app:" + pw + "@h/db?x=%zz", "parameters do not parse"},
		{"mysql://app:pw%zz" + pw + "@h/db", "does not parse"},
	} {
		_, err := ParseStore(tc.url)
		if err == nil {
			t.Errorf("%s: parsed, want an error containing %q", tc.url, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got  %v\n want it to contain %q", tc.url, err, tc.want)
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("%s: the error shows the password: %v", tc.url, err)
		}
		if ee, ok := err.(*ExitError); !ok || ee.Code != 2 {
			t.Errorf("%s: %T is not a usage error (exit status 2)", tc.url, err)
		}
	}
}

// TestMySQLNames: --schema and --prefix are refused on a MySQL store with
// the fix; the identity names the server, the database and the table.
func TestMySQLNames(t *testing.T) {
	t.Parallel()
	if err := (StoreFlags{Schema: "billing"}).CheckNames("mysql"); err == nil || !strings.Contains(err.Error(), "put the database in the URL") {
		t.Errorf("--schema on MySQL: %v", err)
	}
	if err := (StoreFlags{Prefix: "{x}"}).CheckNames("mysql"); err == nil || !strings.Contains(err.Error(), "name a MySQL outbox with --table") {
		t.Errorf("--prefix on MySQL: %v", err)
	}
	if err := (StoreFlags{Table: "orders_outbox"}).CheckNames("mysql"); err != nil {
		t.Errorf("--table on MySQL: %v", err)
	}
	tg, err := ParseStore("mysql://a:secret-1@h/db?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	tg2, err := ParseStore("mariadb://b@h:3306/db")
	if err != nil {
		t.Fatal(err)
	}
	id, id2 := Identity(tg, StoreFlags{}), Identity(tg2, StoreFlags{Table: "outbox"})
	if id != "mysql://h:3306/db `outbox`" || id != id2 {
		t.Errorf("identities %q and %q, want both mysql://h:3306/db `outbox`", id, id2)
	}
	if other := Identity(tg, StoreFlags{Table: "o2"}); other == id {
		t.Errorf("another table has the same identity %q", other)
	}
}
