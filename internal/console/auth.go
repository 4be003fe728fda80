package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Who may use the console: whoever holds the operator token. A browser
// presents it once (/login) and gets a session; a script sends it as a
// bearer token with each request. A session is a row of console_sessions
// (migrations/00034), so that a logout ends it at every console sharing
// the database, and its cookie is signed with a key derived from the
// token, so that changing the token ends every session too.

// cookieName is the session cookie of the console a request reached: its
// name carries the port the browser addressed. A browser sends a host's
// cookies to every port of it, so two consoles on one machine (on two
// databases, or with two tokens) would otherwise overwrite each other's
// session at each login, and each would find the other's cookie in its
// place. Replicas behind one proxy name share the name, and the session
// table.
func cookieName(r *http.Request) string {
	port := "80"
	if r.TLS != nil {
		port = "443"
	}
	if _, p, err := net.SplitHostPort(r.Host); err == nil {
		port = p
	}
	return "phasepay_console_" + port
}

// sessionTTL is how long a session lasts after its login.
const sessionTTL = 12 * time.Hour

// sessionDB is what sessions are kept in: the console's pool.
type sessionDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type authenticator struct {
	digest  [sha256.Size]byte // of the token: compared, never the token itself
	key     []byte            // signs sessions, CSRF tokens and refusals
	db      sessionDB
	now     func() time.Time
	guesses *guessLimit
}

func newAuthenticator(token string, db sessionDB, now func() time.Time, guesses *guessLimit) *authenticator {
	k := hmac.New(sha256.New, []byte(token))
	k.Write([]byte("phasepay console session key"))
	return &authenticator{digest: sha256.Sum256([]byte(token)), key: k.Sum(nil), db: db, now: now, guesses: guesses}
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

// The statements of sessions. Times come from the console's clock (Now),
// as the cookie's lifetime does.
const (
	sessionInsertSQL  = `INSERT INTO console_sessions (id_hash, created_at, expires_at) VALUES ($1, $2, $3)`
	sessionValidSQL   = `SELECT true FROM console_sessions WHERE id_hash = $1 AND expires_at > $2`
	sessionDeleteSQL  = `DELETE FROM console_sessions WHERE id_hash = $1`
	sessionsExpireSQL = `DELETE FROM console_sessions WHERE expires_at <= $1`
)

// newSession starts a session and returns its cookie's value: a random id
// and its signature. The table keeps the id's hash only.
func (a *authenticator) newSession(ctx context.Context) (string, error) {
	var id [32]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	now := a.now()
	// Expired sessions go at logins, which are rare: no chore of its own.
	if _, err := a.db.Exec(ctx, sessionsExpireSQL, now); err != nil {
		return "", fmt.Errorf("expire console sessions: %w", err)
	}
	h := sha256.Sum256(id[:])
	if _, err := a.db.Exec(ctx, sessionInsertSQL, h[:], now, now.Add(sessionTTL)); err != nil {
		return "", fmt.Errorf("start a console session: %w", err)
	}
	v := base64.RawURLEncoding.EncodeToString(id[:])
	return v + "." + a.mac("session", v), nil
}

// sessionID is the hash a cookie's value names its session by, once its
// signature holds: a cookie made under another token, or made up, costs
// no statement.
func (a *authenticator) sessionID(v string) ([]byte, bool) {
	id, sig, ok := strings.Cut(v, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(a.mac("session", id))) {
		return nil, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil {
		return nil, false
	}
	h := sha256.Sum256(raw)
	return h[:], true
}

// sessionValid reports whether the session v names is still open: not
// expired and not ended by a logout.
func (a *authenticator) sessionValid(ctx context.Context, v string) (bool, error) {
	h, ok := a.sessionID(v)
	if !ok {
		return false, nil
	}
	var found bool
	err := a.db.QueryRow(ctx, sessionValidSQL, h, a.now()).Scan(&found)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read a console session: %w", err)
	}
	return true, nil
}

// endSession ends the session v names, at every console.
func (a *authenticator) endSession(ctx context.Context, v string) error {
	h, ok := a.sessionID(v)
	if !ok {
		return nil
	}
	if _, err := a.db.Exec(ctx, sessionDeleteSQL, h); err != nil {
		return fmt.Errorf("end a console session: %w", err)
	}
	return nil
}

// sessionKey carries a request's valid session cookie in its context, once
// require has checked it.
type sessionKey struct{}

// session returns the request's session cookie as require admitted it, or
// "" (a bearer client, or a page outside require).
func session(r *http.Request) string {
	s, _ := r.Context().Value(sessionKey{}).(string)
	return s
}

// bearerToken returns the token of the request's Authorization header, if
// it has exactly one of the bearer kind.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Values("Authorization")
	if len(h) != 1 {
		return "", false
	}
	return strings.CutPrefix(h[0], "Bearer ")
}

// require admits a request with an open session or the bearer token; a
// browser without one is sent to /login, anything else gets 401. A wrong
// bearer token counts as a guess (guard.go).
func (a *authenticator) require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(cookieName(r)); err == nil {
			ok, err := a.sessionValid(r.Context(), c.Value)
			if err != nil {
				http.Error(w, "The database did not answer: the console cannot check your session.", http.StatusServiceUnavailable)
				return
			}
			if ok {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, c.Value)))
				return
			}
		}
		if tok, ok := bearerToken(r); ok {
			if wait := a.guesses.wait(r, a.now()); wait > 0 {
				tooManyGuesses(w, wait)
				return
			}
			if a.tokenOK(tok) {
				next.ServeHTTP(w, r)
				return
			}
			a.guesses.wrong(r, a.now())
		}
		if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
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
	s := session(r)
	if s == "" {
		return ""
	}
	return a.mac("csrf", s)
}

// checkCSRF refuses a form posted with a session but without its CSRF
// token. It runs inside require.
func (a *authenticator) checkCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if session(r) == "" { // admitted by the bearer token
			next.ServeHTTP(w, r)
			return
		}
		want := a.csrfToken(r)
		if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(want)) {
			http.Error(w, "the form's CSRF token is missing or stale: reload the page", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// signRefusal and refusalOK let a lever's refusal travel in the address of
// the page it redirects to (actions.go) without letting anyone else put
// words on the operator's screen: the text is shown only with a signature
// of this console, made for this session.
func (a *authenticator) signRefusal(r *http.Request, msg string) string {
	return a.mac("refused", session(r), msg)
}

func (a *authenticator) refusalOK(r *http.Request, msg, sig string) bool {
	return msg != "" && hmac.Equal([]byte(sig), []byte(a.signRefusal(r, msg)))
}

// login admits a browser: GET /login?token=… (the link `api console`
// prints) or the form's POST; either starts a session and goes on to
// next. The token leaves the address bar at once (a redirect), and no
// page sends a Referer. Wrong tokens are counted per address and slowed
// (guard.go).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.FormValue("next"))
	token := r.FormValue("token")
	if token == "" {
		s.render(w, r, view{template: "login", page: page{Title: "Log in", Data: next}})
		return
	}
	if wait := s.auth.guesses.wait(r, s.auth.now()); wait > 0 {
		w.Header().Set("Retry-After", retryAfter(wait))
		s.render(w, r, view{template: "login", status: http.StatusTooManyRequests, page: page{Title: "Log in",
			Error: fmt.Sprintf("Too many wrong tokens from your address: try again in %s s.", retryAfter(wait)), Data: next}})
		return
	}
	if !s.auth.tokenOK(token) {
		s.auth.guesses.wrong(r, s.auth.now())
		s.render(w, r, view{template: "login", status: http.StatusUnauthorized,
			page: page{Title: "Log in", Error: "That is not the operator token.", Data: next}})
		return
	}
	v, err := s.auth.newSession(r.Context())
	if err != nil {
		s.cfg.Logger.Error("console: login failed", "error", err.Error())
		s.render(w, r, view{template: "login", status: http.StatusServiceUnavailable,
			page: page{Title: "Log in", Error: "The database did not answer: try again.", Data: next}})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: v, Path: "/", MaxAge: int(sessionTTL.Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session on the server, then forgets its cookie: a copy
// of the cookie kept elsewhere opens nothing either.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if err := s.auth.endSession(r.Context(), session(r)); err != nil {
		s.cfg.Logger.Error("console: logout failed", "error", err.Error())
		http.Error(w, "The database did not answer: you are not logged out yet; try again.", http.StatusServiceUnavailable)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// localPath keeps next if it is a path of this console, else "/": a login
// link must not send the operator elsewhere. See consolePath.
func localPath(next string) string {
	if !consolePath(next) {
		return "/"
	}
	return next
}

// consolePath reports whether p is a path of this console: one leading
// "/", then printable ASCII without a backslash, and the same once its
// path is percent-decoded.
//
// Browsers parse a Location as WHATWG URLs do, not as net/url does: they
// drop every tab and newline ("/\t/evil.example" is "//evil.example",
// another host), read "\" as "/" ("/\evil.example"), and trim control
// characters. So anything a browser might read differently is refused,
// not repaired. See pitfall O9 "A login link that sends the operator to
// another site".
func consolePath(p string) bool {
	if len(p) < 1 || p[0] != '/' || strings.HasPrefix(p, "//") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return false
		}
	}
	path, _, _ := strings.Cut(p, "?")
	decoded, err := url.PathUnescape(path)
	if err != nil || !utf8.ValidString(decoded) || strings.HasPrefix(decoded, "//") || strings.ContainsRune(decoded, '\\') {
		return false
	}
	for _, c := range decoded {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// retryAfter is a Retry-After header's value for a wait: whole seconds,
// rounded up.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}
