package console

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/operator"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/routing"
)

// Config configures a Server.
type Config struct {
	// Pool reads the database (required).
	Pool *pgxpool.Pool
	// Desk retries and resolves requests (required): the same desk
	// `api requests retry|resolve` acts through.
	Desk *operator.Desk
	// Token is the operator token (required, at least MinTokenLength
	// characters).
	Token string
	// Addr is the address the console listens on, as bound (required):
	// with localhost at its port and Hosts, the names a request may
	// address it by (guard.go).
	Addr string
	// Hosts are the other names the console answers to (CONSOLE_HOSTS):
	// "name" at any port, or "name:port".
	Hosts []string
	// Now is the console's clock for sessions and the guessing limit.
	// Default time.Now; tests move it.
	Now func() time.Time
	// Routing names the PSPs the overview shows, with the breaker
	// threshold and cool-down it judges their recorded calls by. Empty:
	// the PSPs seen in the recorded calls.
	Routing routing.Config
	// Retention and EventsRetention are the reaper's RETENTION and
	// EVENTS_RETENTION, for the partitions' drop dates. Defaults
	// reaper.RetentionDefault and events.RetentionDefault.
	Retention, EventsRetention time.Duration
	// Refresh is how often a live page is re-rendered. Default 2s.
	Refresh time.Duration
	// Logger receives the console's lines. Default: discarded.
	Logger *slog.Logger
}

// MinTokenLength is the shortest operator token accepted.
const MinTokenLength = 16

//go:embed assets
var assets embed.FS

// Server serves the console.
type Server struct {
	cfg   Config
	auth  *authenticator
	hosts *hostGuard
	pages map[string]*template.Template
	mux   http.Handler
}

// New returns a console Server.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil || cfg.Desk == nil {
		return nil, errors.New("console: a pool and an operator desk are required")
	}
	if len(cfg.Token) < MinTokenLength {
		return nil, fmt.Errorf("console: the operator token must be at least %d characters", MinTokenLength)
	}
	cfg.Retention = cmp.Or(cfg.Retention, reaper.RetentionDefault)
	cfg.EventsRetention = cmp.Or(cfg.EventsRetention, events.RetentionDefault)
	cfg.Refresh = cmp.Or(cfg.Refresh, 2*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	hosts, err := newHostGuard(cfg.Addr, cfg.Hosts)
	if err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, auth: newAuthenticator(cfg.Token, cfg.Pool, cfg.Now, newGuessLimit(cfg.Logger)), hosts: hosts, pages: pages}
	s.mux = s.routes()
	return s, nil
}

// Handler is the console's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) routes() http.Handler {
	static, _ := fs.Sub(assets, "assets") // a constant directory of the embed
	mux := http.NewServeMux()
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /login", s.login)
	mux.HandleFunc("POST /login", s.login)
	mux.Handle("POST /logout", s.auth.require(s.auth.checkCSRF(http.HandlerFunc(s.logout))))
	page := func(pattern string, h pageFunc) {
		mux.Handle(pattern, s.auth.require(s.pageHandler(h)))
	}
	page("GET /{$}", s.overview)
	page("GET /requests", s.requests)
	page("GET /request", s.request)
	page("GET /charge", s.charge)
	page("GET /webhooks", s.webhookEndpoints)
	page("GET /webhook", s.webhookEndpoint)
	mux.Handle("POST /request/retry", s.auth.require(s.auth.checkCSRF(http.HandlerFunc(s.retry))))
	mux.Handle("POST /request/resolve", s.auth.require(s.auth.checkCSRF(http.HandlerFunc(s.resolve))))
	mux.Handle("POST /webhook/redeliver", s.auth.require(s.auth.checkCSRF(http.HandlerFunc(s.redeliver))))
	// Browsers send Sec-Fetch-Site or Origin with every POST: one from
	// another site is refused before it reaches a handler, whatever
	// cookie it carries. The CSRF token guards older browsers too. A
	// request to a name the console was not given goes no further than
	// the guard of hosts, which a cross-origin check cannot replace: a
	// rebound name is the page's own origin.
	return securityHeaders(s.hosts.wrap(http.NewCrossOriginProtection().Handler(mux)))
}

// contentSecurityPolicy allows this origin's style sheet and script and
// nothing else: no inline script, no inline style, no other host.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// The login link carries the token in its query: no page may pass
		// its address on.
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// page is what every page's template gets.
type page struct {
	Title string
	// Nav names the active entry of the navigation.
	Nav string
	// CSRF is the token the page's forms carry.
	CSRF string
	// Live streams the page's live region.
	Live  bool
	Error string
	Flash string
	Now   time.Time
	Data  any
}

// pageFunc builds a page for a request; the page's template is named
// after it in view.
type pageFunc func(r *http.Request) (view, error)

// view is a page to render: its template and its data.
type view struct {
	template string
	page     page
	status   int
}

// errNotFound renders as a 404 page.
var errNotFound = errors.New("not found")

// badRequest is a request the console cannot answer as asked; its text is
// shown.
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

// pageHandler renders a page, or its live region as server-sent events
// when the browser asks for text/event-stream (see live.go).
func (s *Server) pageHandler(h pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wantsEvents(r) {
			s.stream(w, r, h)
			return
		}
		v, err := s.build(r, h)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.render(w, r, v)
	})
}

// build runs h under a timeout, so that a database that does not answer
// fails a page rather than hanging it.
func (s *Server) build(r *http.Request, h pageFunc) (view, error) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	return h(r.WithContext(ctx))
}

// pageTimeout bounds the reads of one page.
const pageTimeout = 10 * time.Second

func (s *Server) render(w http.ResponseWriter, r *http.Request, v view) {
	t, ok := s.pages[v.template]
	if !ok {
		s.cfg.Logger.Error("console: no such template", "template", v.template)
		http.Error(w, "The console could not render this page.", http.StatusInternalServerError)
		return
	}
	v.page.CSRF = s.auth.csrfToken(r)
	if v.page.Now.IsZero() {
		v.page.Now = time.Now()
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout", v.page); err != nil {
		s.cfg.Logger.Error("console: render failed", "template", v.template, "error", err.Error())
		http.Error(w, "The console could not render this page.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(cmp.Or(v.status, http.StatusOK))
	_, _ = w.Write(b.Bytes())
}

// fail renders an error page: the text of a bad request or a missing
// object, a generic line for anything else (logged with its cause).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := http.StatusInternalServerError, "The console could not read this page; see its log."
	var bad badRequest
	switch {
	case errors.As(err, &bad):
		status, msg = http.StatusBadRequest, bad.msg
	case errors.Is(err, errNotFound):
		status, msg = http.StatusNotFound, "Not found."
	case errors.Is(err, context.DeadlineExceeded):
		status, msg = http.StatusServiceUnavailable, "The database did not answer in time."
	default:
		s.cfg.Logger.Error("console page failed", "path", r.URL.Path, "error", err.Error())
	}
	s.render(w, r, view{template: "error", status: status, page: page{Title: http.StatusText(status), Error: msg}})
}
