package cli

import (
	"net/url"
	"os"
	"strings"
	"testing"
)

// looseUnescape decodes every valid %XX of s and keeps the rest, so that
// a percent-encoded parameter name is recognised.
func looseUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := url.PathUnescape(s[i : i+3]); err == nil {
				b.WriteString(v)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readsFiles reports whether a store URL names a file that parsing would
// read (TLS material, a pgpass or service file): fuzzing such an input
// could read any file on the machine, /dev/zero included.
func readsFiles(raw string) bool {
	s := strings.ToLower(raw)
	s += " " + looseUnescape(s) + " " + looseUnescape(looseUnescape(s))
	for _, w := range []string{"tls_ca", "tls_cert", "tls_key", "sslrootcert", "sslcert", "sslkey", "passfile", "service"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// urlPassword returns the password of raw as net/url reads it, and raw with
// that password's text replaced by other, or ok false when net/url does not
// parse raw or it has no password.
func urlPassword(raw, other string) (pass, replaced string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return "", "", false
	}
	pass, ok = u.User.Password()
	if !ok {
		return "", "", false
	}
	scheme, rest, found := strings.Cut(raw, "://")
	if !found {
		return "", "", false
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return "", "", false
	}
	user, _, _ := strings.Cut(authority[:at], ":")
	return pass, scheme + "://" + user + ":" + other + rest[at:], true
}

// FuzzParseStore checks ParseStore, which turns a --store URL into client
// options without connecting: it never panics, and its error never holds
// the URL's password. Inputs that name files to read are skipped. The seed
// corpus is in testdata/fuzz/FuzzParseStore.
func FuzzParseStore(f *testing.F) {
	for _, s := range []string{
		"",
		"postgres://app:s3cretpw@db.internal:5432/app?sslmode=disable",
		"postgresql://app@h1:5432,h2:5433/app?connect_timeout=5&application_name=x",
		"postgres://app:s3cretpw@db:notaport/app",
		"postgres://app:s3cr%zzet@db/app",
		"redis://:s3cretpw@localhost:6379/0",
		"redis://user:s3cretpw@localhost/15?dial_timeout=5s&pool_size=10",
		"redis://u:s3cretpw@h/0?dial_timeout=bogus",
		"redis://u:s3cretpw@h/notadb",
		"rediss://u:s3cretpw@[::1]:6380/0?skip_verify=true",
		"redis+sentinel://:s3cretpw@s1:26379,s2:26379,s3/mymaster/0?sentinel_password=sentpass",
		"rediss+sentinel://s1/",
		"redis+cluster://app:s3cretpw@10.0.0.1:7000,10.0.0.2:7000?read_timeout=3s",
		"redis+cluster://h/3",
		"redis://h1,h2/0",
		"redis://a:b%@h/0",
		"redis://,/",
		"mysql://u:s3cretpw@h/db",
		"mariadb://u:s3cretpw@[::1]:3307/db?timeout=5s&charset=utf8mb4&innodb_lock_wait_timeout=3",
		"mysql://u:s3cretpw@h:99999/db",
		"mysql://u:s3cretpw@h",
		"mysql://u:s3cretpw@h/db/x",
		"mysql://:s3cretpw@h/db",
		"mysql://u:s3cretpw@h/db?sslmode=verify-full",
		"mysql://u:s3cretpw@h/db?sslmode=bogus",
		"mysql://u:s3cretpw@h/db?multiStatements=true",
		"mysql://u:s3cretpw@h/db?timeout=bogus",
		"mysql://u:s3cretpw@h1,h2/db",
		"://x",
		"redis://[::1/0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if readsFiles(raw) {
			t.Skip("names a file to read")
		}
		target, err := ParseStore(raw)
		if err == nil {
			if target == nil || (target.Kind != "postgres" && target.Kind != "mysql" && target.Kind != "redis") {
				t.Fatalf("parseStore(%q) = %+v, nil", raw, target)
			}
			return
		}
		const other = "Qz9OtherPw"
		pass, replaced, ok := urlPassword(raw, other)
		if !ok || len(pass) < 4 || !strings.Contains(err.Error(), pass) {
			return
		}
		// The password may also be a word of the message, or another part
		// of the URL: it leaks only if the same URL with another password
		// gives an error without it.
		if _, err2 := ParseStore(replaced); err2 != nil && strings.Contains(err2.Error(), pass) {
			return
		}
		t.Fatalf("the error of %q holds its password %q: %v", raw, pass, err)
	})
}

// FuzzReadConfig checks that readConfig, the parser of the --config file,
// never panics and returns either values or an error. The seed corpus is
// in testdata/fuzz/FuzzReadConfig.
func FuzzReadConfig(f *testing.F) {
	for _, s := range []string{
		"",
		"store: postgres://app@db.internal:5432/app?sslmode=verify-full\nschema: billing\ntimeout: 1m\n",
		"kafka-brokers: [k1:9092, k2:9092]\n",
		"kafka-brokers:\n  - k1:9092\n  - k2:9092\n",
		"labels:\n  a: b\n  c: d\n",
		"store: ~\n",
		"- a\n- b\n",
		"store: a\nstore: b\n",
		"? [a, b]\n: c\n",
		"a: &x 1\nb: *x\n",
		"a: {b: [c]}\n",
		"a: [{b: c}]\n",
		"\"\": x\n",
		"store: \"redis://:s3cretpw@h:6379/0\n",
		"\t: :\n",
		"%YAML 1.1\n---\na: b\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := os.CreateTemp(dir, "config-*.yaml")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(file.Name())
		if _, err := file.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := file.Close(); err != nil {
			t.Fatal(err)
		}
		values, err := readConfig(file.Name(), &SecretSet{})
		if err == nil && values == nil {
			t.Fatal("no values and no error")
		}
		if err != nil && values != nil {
			t.Fatalf("values %v with error %v", values, err)
		}
	})
}
