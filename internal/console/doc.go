// Package console is phasepay's operator console: a few server-rendered
// pages over the database, served by `api console` on a listener of its
// own, for watching requests live and acting on the ones that did not end
// by themselves.
//
// # Why a command of its own
//
// The console could have been one more listener of the api or the reaper
// process. It is not, because the moments an operator needs it are the
// moments those processes are in trouble: a takeover is watched by killing
// an api (a console inside it would die with it, and each api would show
// only its own view), a PSP outage is ridden out by the reapers (which
// should not serve HTML while they work), and neither should carry an
// operator's credentials. Everything the console shows is in PostgreSQL,
// which every phasepay process shares, so a separate process sees all of
// them at once and survives any of them; it needs no configuration beyond
// what `api requests` already reads. The one thing a separate process
// cannot see is another process's memory, where the PSP circuit breakers
// live: the overview shows instead what a breaker would make of every PSP
// call recorded in the last minute (see pspHealth), and each process's own
// breakers stay on its /metrics (phasepay_psp_breaker_state).
//
// # Pages
//
// An overview (requests per second by outcome, in flight, due,
// needs_attention, the webhook backlog, PSP health, partitions with their
// sizes and drop dates), the requests (filtered by tenant, state,
// operation and age, a page at a time by keyset), one request (its
// timeline on a time axis with a lane per worker that held it, its stored
// answer, and the operator's retry and resolve), a charge (its attempts
// across PSPs, refunds, events and their deliveries) and the webhook
// endpoints with their delivery attempts. Pages are html/template, which
// escapes everything they print; the live parts of a page are re-rendered
// on the server and streamed as server-sent events to a few lines of
// embedded script (assets/console.js). Nothing is fetched from anywhere
// else: the style sheet and the script are embedded (embed.FS), and the
// Content-Security-Policy allows nothing but this origin.
//
// # Who may use it
//
// The console listens on 127.0.0.1 by default and admits whoever presents
// the operator token (CONSOLE_TOKEN, or one generated at start and printed
// on stdout), compared in constant time: as a bearer token, or once on
// /login, after which a session stands for it: a row of console_sessions
// that POST /logout deletes, named by an HttpOnly, SameSite=Strict cookie
// (12 hours) signed under a key derived from the token. A tenant's API key
// is never an operator token: the console refuses to start with one.
// Retry and resolve are POST forms carrying a CSRF token derived from the
// session, behind net/http's cross-origin protection, and act through
// package operator, the same code `api requests retry|resolve` runs, so a
// resolution from the browser is looked up at the PSP and audited exactly
// as one from a shell. No secret is shown: webhook secrets are never read,
// and URLs are printed without their credentials or query.
//
// Its doors (auth.go, guard.go): a login link goes on only to a path of
// the console; a request naming another Host than the console's own names
// (CONSOLE_HOSTS) is refused, against DNS rebinding; an address that sent
// 5 wrong tokens within a minute is refused for a minute.
package console
