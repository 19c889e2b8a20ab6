package ui

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Cookie and header names (see the package documentation, "Security").
const (
	csrfCookie  = "outbox_csrf"
	csrfHeader  = "X-Outbox-CSRF"
	tokenCookie = "outbox_token"
)

// equal compares secrets in constant time, whatever their lengths.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// authenticate checks the token or basic credentials when the options ask
// for them, answering 401 (and false) when they are missing or wrong. A
// good ?token= sets the token cookie and redirects to the URL without it.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) bool {
	tok, user := s.opts.Token, s.opts.BasicUser
	if tok == "" && user == "" {
		return true
	}
	if tok != "" {
		if q := r.URL.Query(); q.Has("token") {
			if !equal(q.Get("token"), tok) {
				s.unauthorized(w, "ui: the token in ?token= is wrong; use the token outbox ui was started with (--token or OUTBOX_UI_TOKEN)")
				return false
			}
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: tok, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
			q.Del("token")
			// One leading slash: "//host/..." would send the browser to
			// another site.
			u := url.URL{Path: "/" + strings.TrimLeft(r.URL.Path, "/\\"), RawQuery: q.Encode()}
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return false
		}
		// The scheme name is case-insensitive (RFC 9110, 11.1).
		if scheme, a, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " "); ok && strings.EqualFold(scheme, "Bearer") && equal(strings.TrimSpace(a), tok) {
			return true
		}
		if c, err := r.Cookie(tokenCookie); err == nil && equal(c.Value, tok) {
			return true
		}
	}
	if user != "" {
		if u, p, ok := r.BasicAuth(); ok {
			// Both compared, always, so the time says nothing of which is wrong.
			uok, pok := equal(u, user), equal(p, s.opts.BasicPassword)
			if uok && pok {
				return true
			}
		}
	}
	s.unauthorized(w, s.authHint())
	return false
}

func (s *Server) authHint() string {
	switch {
	case s.opts.Token != "" && s.opts.BasicUser != "":
		return "ui: authentication needed: send \"Authorization: Bearer TOKEN\", open the page once with ?token=TOKEN, or give the basic credentials"
	case s.opts.Token != "":
		return "ui: authentication needed: send \"Authorization: Bearer TOKEN\" or open the page once with ?token=TOKEN (the token outbox ui was started with)"
	default:
		return "ui: authentication needed: give the basic credentials (user and password) the dashboard was started with"
	}
}

func (s *Server) unauthorized(w http.ResponseWriter, msg string) {
	if s.opts.BasicUser != "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="outbox", charset="UTF-8"`)
	}
	writeError(w, http.StatusUnauthorized, msg)
}

// setCSRFCookie gives the browser its CSRF cookie, keeping a well-formed
// one it already has (so two tabs share one).
func (s *Server) setCSRFCookie(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(csrfCookie); err == nil && validCSRF(c.Value) {
		return
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: hex.EncodeToString(b), Path: "/",
		HttpOnly: false, // the page's script copies it into the header
		Secure:   r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
}

func validCSRF(v string) bool {
	if len(v) != 64 {
		return false
	}
	_, err := hex.DecodeString(v)
	return err == nil
}

const readOnlyMessage = "ui: the dashboard is read-only; restart it without read-only mode (outbox ui without --read-only) to requeue or cancel"

// checkAction checks a POST before it changes anything: not read-only, a
// JSON body, an Origin (when sent) of this host and the CSRF header equal
// to the cookie. It answers the error (and false) otherwise.
func (s *Server) checkAction(w http.ResponseWriter, r *http.Request) bool {
	if !allow(w, r, http.MethodPost) {
		return false
	}
	if s.opts.ReadOnly {
		writeError(w, http.StatusForbidden, readOnlyMessage)
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "ui: an action's body must be JSON: send Content-Type: application/json")
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			writeError(w, http.StatusForbidden, "ui: the request comes from another site (Origin "+o+" is not "+r.Host+"); act from the dashboard's own page")
			return false
		}
	}
	c, err := r.Cookie(csrfCookie)
	h := r.Header.Get(csrfHeader)
	switch {
	case err != nil || !validCSRF(c.Value):
		writeError(w, http.StatusForbidden, "ui: the CSRF cookie "+csrfCookie+" is missing; reload the page (GET /) to get one")
		return false
	case h == "":
		writeError(w, http.StatusForbidden, "ui: the header "+csrfHeader+" is missing; send it with the value of the cookie "+csrfCookie)
		return false
	case !equal(h, c.Value):
		writeError(w, http.StatusForbidden, "ui: the header "+csrfHeader+" does not match the cookie "+csrfCookie+"; reload the page and try again")
		return false
	}
	return true
}
