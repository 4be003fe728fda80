package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Who may use the console: whoever holds the operator token. A browser
// presents it once (/login) and gets a session cookie signed with a key
// derived from it; a script sends it as a bearer token with each request.
// Changing the token ends every session.

// cookieName is the session cookie.
const cookieName = "phasepay_console"

// sessionTTL is how long a session lasts after its login.
const sessionTTL = 12 * time.Hour

type authenticator struct {
	digest [sha256.Size]byte // of the token: compared, never the token itself
	key    []byte            // signs sessions and CSRF tokens
	now    func() time.Time
}

func newAuthenticator(token string) *authenticator {
	k := hmac.New(sha256.New, []byte(token))
	k.Write([]byte("phasepay console session key"))
	return &authenticator{digest: sha256.Sum256([]byte(token)), key: k.Sum(nil), now: time.Now}
}

// tokenOK compares given with the token in constant time: equal-length
// digests, so that neither the content nor the length leaks through the
// time an answer takes.
func (a *authenticator) tokenOK(given string) bool {
	d := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(d[:], a.digest[:]) == 1
}

func (a *authenticator) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession is a session cookie's value: when it was issued, signed.
func (a *authenticator) newSession() string {
	at := strconv.FormatInt(a.now().Unix(), 10)
	return at + "." + a.mac("session", at)
}

func (a *authenticator) sessionOK(v string) bool {
	at, sig, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	issued, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return false
	}
	age := a.now().Sub(time.Unix(issued, 0))
	if age < -time.Minute || age > sessionTTL {
		return false
	}
	return hmac.Equal([]byte(sig), []byte(a.mac("session", at)))
}

// session returns the request's valid session cookie, if it has one.
func (a *authenticator) session(r *http.Request) (string, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil || !a.sessionOK(c.Value) {
		return "", false
	}
	return c.Value, true
}

// bearer reports whether the request carries the token as a bearer token.
func (a *authenticator) bearer(r *http.Request) bool {
	h := r.Header.Values("Authorization")
	if len(h) != 1 {
		return false
	}
	tok, ok := strings.CutPrefix(h[0], "Bearer ")
	return ok && a.tokenOK(tok)
}

// require admits a request with a session or the bearer token; a browser
// without one is sent to /login, anything else gets 401.
func (a *authenticator) require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := a.session(r); ok || a.bearer(r) {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="phasepay console"`)
		http.Error(w, "the operator token is required", http.StatusUnauthorized)
	})
}

// csrfToken is what the request's forms carry: derived from its session,
// so that a page of another site, which cannot read it, cannot forge a
// form. Empty without a session (a bearer client needs none: no browser
// attaches a bearer token by itself).
func (a *authenticator) csrfToken(r *http.Request) string {
	s, ok := a.session(r)
	if !ok {
		return ""
	}
	return a.mac("csrf", s)
}

// checkCSRF refuses a form posted with a session but without its CSRF
// token.
func (a *authenticator) checkCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.bearer(r) {
			next.ServeHTTP(w, r)
			return
		}
		want := a.csrfToken(r)
		if want == "" || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(want)) {
			http.Error(w, "the form's CSRF token is missing or stale: reload the page", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *authenticator) setSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: a.newSession(), Path: "/", MaxAge: int(sessionTTL.Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// login admits a browser: GET /login?token=… (the link `api console`
// prints) or the form's POST; either sets the session and goes on to
// next. The token leaves the address bar at once (a redirect), and no
// page sends a Referer.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.FormValue("next"))
	token := r.FormValue("token")
	if token == "" {
		s.render(w, r, view{template: "login", page: page{Title: "Log in", Data: next}})
		return
	}
	if !s.auth.tokenOK(token) {
		s.render(w, r, view{template: "login", status: http.StatusUnauthorized,
			page: page{Title: "Log in", Error: "That is not the operator token.", Data: next}})
		return
	}
	s.auth.setSession(w, r)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// localPath keeps next if it is a path of this console, else "/": a login
// link must not send the operator elsewhere ("//host" and "/\host" are
// other hosts to a browser).
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}
