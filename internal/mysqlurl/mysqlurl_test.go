package mysqlurl

import (
	"strings"
	"testing"
)

func TestDSN(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"mysql://root@127.0.0.1:3306/", "root@tcp(127.0.0.1:3306)/"},
		{"mysql://root@127.0.0.1:13306/outbox", "root@tcp(127.0.0.1:13306)/outbox"},
		{"mysql://app:s3cret@db.internal/app?tls=true&timeout=2s", "app:s3cret@tcp(db.internal:3306)/app?tls=true&timeout=2s"},
		{"mysql://[::1]:3307/x", "tcp([::1]:3307)/x"},
		{"mysql:///x", "tcp(127.0.0.1:3306)/x"},
	} {
		got, err := DSN(c.url)
		if err != nil {
			t.Errorf("DSN(%q): %v", c.url, err)
			continue
		}
		if got != c.want {
			t.Errorf("DSN(%q) = %q, want %q", c.url, got, c.want)
		}
	}
}

func TestDSNRejectsOtherURLsWithoutThePassword(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"postgres://u:s3cret@h/db", "mysql://u:s3cret@h/a/b", "mysql://u:s3cret@h:port/db", "root@tcp(h)/db"} {
		_, err := DSN(raw)
		if err == nil {
			t.Errorf("DSN(%q): no error", raw)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("DSN(%q): the error repeats the password: %v", raw, err)
		}
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, db, user, want string }{
		{"mysql://root@127.0.0.1:3306/", "chaos_x", "", "mysql://root@127.0.0.1:3306/chaos_x"},
		{"mysql://root@127.0.0.1:3306/old?timeout=2s", "new", "relay", "mysql://relay@127.0.0.1:3306/new?timeout=2s"},
	} {
		got, err := WithDatabase(c.url, c.db, c.user)
		if err != nil || got != c.want {
			t.Errorf("WithDatabase(%q, %q, %q) = %q, %v; want %q", c.url, c.db, c.user, got, err, c.want)
		}
	}
}
