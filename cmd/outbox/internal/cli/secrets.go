package cli

import (
	"errors"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/alecthomas/kong"
)

// Redaction. No password or token the CLI is given (in a store URL, in the
// environment, in the --config file, in a flag such as a SASL password)
// may appear in anything it prints. Two mechanisms work together:
//
//   - structural redaction (RedactText) rewrites every URL-looking text:
//     the password of scheme://user:password@host, the whole user info of
//     a Redis or NATS URL with a lone user info (go-redis sends it as
//     AUTH, nats.go as a token), the password of a go-sql-driver/mysql
//     DSN (user:password@tcp(host:3306)/db), and the value of every password=, secret= or token= setting (query
//     parameters and key=value connection strings);
//   - exact redaction (SecretSet) replaces every known secret string, raw
//     and percent-decoded, wherever it appears, also in text that does not
//     look like a URL (a driver that echoes a password alone).
//
// Errors get both; stdout and stderr pass through a writer that applies
// exact redaction, a net for anything a command prints. Secrets shorter
// than minSecretLen are only removed structurally: replacing every "pw" in
// the output would mangle it.

// secretMask replaces a secret in output.
const secretMask = "xxxxx"

// MinSecretLen is the shortest secret exact redaction replaces.
const MinSecretLen = 4

var (
	// userInfo matches scheme://userinfo@ (up to the last @ before the
	// host): group 1 the scheme and ://, group 2 the user info.
	userInfo = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/?#]*)@`)
	// secretSetting matches password=..., sslpassword=..., *_secret=...,
	// token=... in a query string or a key=value connection string.
	// dsnUserInfo matches the user info of a go-sql-driver/mysql DSN,
	// user:password@tcp(host:3306)/db: group 1 what precedes it, group 2
	// the user, group 3 the password, group 4 the network and "(".
	dsnUserInfo   = regexp.MustCompile(`(^|[\s"'=(,;])([^\s:/@"'(]*):([^\s"']*)@((?:tcp|tcp4|tcp6|unix)\()`)
	secretSetting = regexp.MustCompile(`(?i)\b([a-z_\-]*(?:password|passwd|pwd|secret|token))(\s*=\s*)('[^']*'|"[^"]*"|[^&\s"',;)]*)`)
)

// placeholderPassword is the word help and error texts write where a
// password goes (redis://USER:PASSWORD@HOST); structural redaction leaves
// it, exact redaction still removes it if it is someone's password.
const placeholderPassword = "PASSWORD"

// RedactText removes passwords from URL-looking text and every known
// secret from s.
func RedactText(s string, known ...string) string {
	s = userInfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := userInfo.FindStringSubmatch(m)
		scheme, info := sub[1], sub[2]
		if user, pw, ok := strings.Cut(info, ":"); ok {
			if pw == placeholderPassword {
				return m
			}
			return scheme + user + ":" + secretMask + "@"
		}
		if loneInfoIsSecret(scheme) && info != "" {
			return scheme + secretMask + "@" // go-redis sends a lone user info as a password, nats.go as a token
		}
		return m
	})
	s = dsnUserInfo.ReplaceAllString(s, "${1}${2}:"+secretMask+"@${4}")
	s = secretSetting.ReplaceAllString(s, "${1}${2}"+secretMask)
	for _, k := range known {
		if len(k) >= MinSecretLen {
			s = strings.ReplaceAll(s, k, secretMask)
		}
	}
	return s
}

// loneInfoIsSecret reports whether the lone user info (no colon) of a URL
// of scheme (with its "://") is a secret: a Redis URL's is the password
// (go-redis sends it as AUTH), a NATS URL's (nats://, tls://) the token.
func loneInfoIsSecret(scheme string) bool {
	s := strings.ToLower(strings.TrimSuffix(scheme, "://"))
	return strings.HasPrefix(s, "redis") || s == "nats" || s == "tls"
}

// URLSecrets returns the secrets in a URL or connection string: the
// password (or a Redis URL's lone user info) and the values of
// password-like settings, raw and percent-decoded.
func URLSecrets(s string) []string {
	var out []string
	add := func(v string) {
		if v == "" {
			return
		}
		out = append(out, v)
		for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if d, err := unescape(v); err == nil && !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	for _, m := range userInfo.FindAllStringSubmatch(s, -1) {
		if _, pw, ok := strings.Cut(m[2], ":"); ok {
			add(pw)
		} else if loneInfoIsSecret(m[1]) {
			add(m[2])
		}
	}
	for _, m := range dsnUserInfo.FindAllStringSubmatch(s, -1) {
		add(m[3])
	}
	for _, m := range secretSetting.FindAllStringSubmatch(s, -1) {
		add(strings.Trim(m[3], `'"`))
	}
	return out
}

// isSecretName reports whether a flag, key or variable name holds a
// secret as a whole value.
func isSecretName(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"password", "passwd", "secret", "token"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// SecretSet is the set of secrets one run knows of. It is safe for
// concurrent use (a progress bar writes from its own goroutine).
type SecretSet struct {
	mu   sync.RWMutex
	list []string
}

// Add records secrets; short and duplicate ones are dropped.
func (s *SecretSet) Add(vals ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range vals {
		if len(v) >= MinSecretLen && !slices.Contains(s.list, v) {
			s.list = append(s.list, v)
		}
	}
	// Longest first, so a secret that contains another is replaced whole.
	slices.SortFunc(s.list, func(a, b string) int { return len(b) - len(a) })
}

// AddValue records the secrets in a value given under name: all of it
// when the name says it is a secret, else the secrets of the URLs in it.
func (s *SecretSet) AddValue(name, value string) {
	if isSecretName(name) {
		s.Add(value)
	}
	s.Add(URLSecrets(value)...)
}

// AddArgs records the secrets in command-line arguments and in the
// OUTBOX_* environment.
func (s *SecretSet) AddArgs(args []string) {
	for i, a := range args {
		s.Add(URLSecrets(a)...)
		name, value, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && ok && isSecretName(name) {
			s.Add(value)
		} else if strings.HasPrefix(a, "-") && !ok && isSecretName(a) && i+1 < len(args) {
			s.Add(args[i+1])
		}
	}
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OUTBOX_") {
			s.AddValue(k, v)
		}
	}
}

func (s *SecretSet) Known() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.list)
}

// Text redacts s structurally and of every known secret.
func (s *SecretSet) Text(str string) string { return RedactText(str, s.Known()...) }

// RedactWriter replaces every known secret in what passes through it. A
// secret split across two Write calls is not caught; the CLI writes whole
// lines.
type RedactWriter struct {
	w       io.Writer
	secrets *SecretSet
}

// NewRedactWriter returns a writer that removes every secret of secrets
// from what it passes to w.
func NewRedactWriter(w io.Writer, secrets *SecretSet) *RedactWriter {
	return &RedactWriter{w: w, secrets: secrets}
}

func (r *RedactWriter) Write(p []byte) (int, error) {
	known := r.secrets.Known()
	s := string(p)
	out := s
	for _, k := range known {
		out = strings.ReplaceAll(out, k, secretMask)
	}
	if out == s {
		return r.w.Write(p)
	}
	if _, err := io.WriteString(r.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// RedactedError is an error whose text had secrets removed; it still
// wraps the original for errors.Is and errors.As.
type RedactedError struct {
	// Msg is the redacted text; Err is the original error.
	Msg string
	Err error
}

func (e *RedactedError) Error() string { return e.Msg }
func (e *RedactedError) Unwrap() error { return e.Err }

// Redact removes passwords from an error's text: structurally from every
// URL-looking part, and every secret of url (a store URL) wherever it
// appears. The result still wraps err.
func Redact(err error, url string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := RedactText(msg, URLSecrets(url)...)
	if clean == msg {
		return err
	}
	var re *RedactedError
	if errors.As(err, &re) && re.Msg == msg {
		return err
	}
	return &RedactedError{Msg: clean, Err: err}
}

// AddFlags records the secrets in the parsed flags' values, wherever they
// came from (command line, environment, config file): all of a flag whose
// name says it is a secret (a SASL password), the passwords of URLs in
// the others.
func (s *SecretSet) AddFlags(kctx *kong.Context) {
	for _, f := range kctx.Flags() {
		switch v := kctx.FlagValue(f).(type) {
		case string:
			s.AddValue(f.Name, v)
		case []string:
			for _, x := range v {
				s.AddValue(f.Name, x)
			}
		}
	}
}
