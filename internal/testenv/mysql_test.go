package testenv

import "testing"

func TestMySQLDSN(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, db, want string }{
		{"mysql://root@127.0.0.1:3306/", "", "root@tcp(127.0.0.1:3306)/"},
		{"mysql://root@127.0.0.1:3306/", "t1", "root@tcp(127.0.0.1:3306)/t1"},
		{"mysql://app:s3cret@db.internal/app?tls=true", "", "app:s3cret@tcp(db.internal:3306)/app?tls=true"},
		{"mysql://app:s3cret@db.internal/app?tls=true", "other", "app:s3cret@tcp(db.internal:3306)/other?tls=true"},
		{"mysql://[::1]:3307/x", "", "tcp([::1]:3307)/x"},
		{"postgres://nope", "d", "root@tcp(127.0.0.1:1)/d"},
	} {
		if got := mysqlDSN(c.url, c.db); got != c.want {
			t.Errorf("mysqlDSN(%q, %q) = %q, want %q", c.url, c.db, got, c.want)
		}
	}
}
