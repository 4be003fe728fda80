package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/dbnotify"
)

// ListenerApplicationName is the application_name of a listener's
// connection, so that an operator (and a test) can find it in
// pg_stat_activity.
const ListenerApplicationName = "phasepay-api-keys-listener"

// Defaults of RevocationListenerConfig.
const (
	MinBackoffDefault     = dbnotify.MinBackoffDefault
	MaxBackoffDefault     = dbnotify.MaxBackoffDefault
	HealthIntervalDefault = dbnotify.HealthIntervalDefault
	// PollIntervalDefault keeps a revoked key refused within the
	// contract's second when polled: a poll's interval, plus its query.
	PollIntervalDefault = dbnotify.PollIntervalDefault
)

// RevocationListenerConfig configures a RevocationListener.
type RevocationListenerConfig struct {
	// Connect opens the listener's own connection to the server itself
	// (DATABASE_URL, or DATABASE_DIRECT_URL behind a transaction pooler),
	// never one of a pool (see package dbnotify). Give it
	// application_name ListenerApplicationName. Nil: the listener polls
	// Poll instead.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Poll is where revocations are polled without Connect: the api's
	// pool, through the pooler. One of Connect and Poll is required.
	Poll DBTX
	// PollInterval is the pause between two polls. Default
	// PollIntervalDefault.
	PollInterval time.Duration
	// MinBackoff is the pause before reconnecting after the connection is
	// lost; it doubles, with jitter, up to MaxBackoff while reconnecting
	// fails. Defaults MinBackoffDefault and MaxBackoffDefault.
	MinBackoff, MaxBackoff time.Duration
	// HealthInterval: after this long without a notification the listener
	// pings its connection, so that a connection lost without the client
	// noticing (a network partition, no RST) is found within about this
	// long (plus a 5 s ping timeout) rather than after the kernel's TCP
	// timeouts; until then the cache's TTL bounds how long a revoked key
	// works. Default HealthIntervalDefault.
	HealthInterval time.Duration
	// Logger receives connection losses (Warn) and reconnections (Info).
	Logger *slog.Logger
}

// RevocationListener keeps an Authenticator's cache true to revocations:
// it hears each one (package dbnotify: LISTEN on a connection of its own,
// or a poll of recent revocations where only a transaction pooler is
// reachable) and drops the revoked key from the cache.
//
// Notifications sent while the connection is down are lost, PostgreSQL
// does not queue them for a session that is gone, and a failed poll hears
// nothing. So from the moment the listener stops hearing until it hears
// again the Authenticator does not use its cache, and the cache is emptied
// when hearing resumes: a key revoked in between is looked up afresh, and
// refused.
type RevocationListener struct {
	auth *Authenticator
	l    *dbnotify.Listener
	once sync.Once

	// TestSignals are the signals of the listener underneath: no-ops
	// until a test calls their Init, before Start. Notified fires once
	// the revoked key has left the cache.
	TestSignals *dbnotify.TestSignals
}

// NewRevocationListener returns a listener for auth; Start runs it.
func NewRevocationListener(auth *Authenticator, cfg RevocationListenerConfig) (*RevocationListener, error) {
	if cfg.Connect == nil && cfg.Poll == nil {
		return nil, errors.New("revocation listener: Connect or Poll is required")
	}
	r := &RevocationListener{auth: auth}
	var poll func(context.Context) ([]string, error)
	if cfg.Connect == nil {
		poll = newRevocationPoll(cfg.Poll)
	}
	l, err := dbnotify.New(dbnotify.Config{
		Name:         "api key revocation listener",
		Channel:      RevocationChannel,
		Connect:      cfg.Connect,
		Poll:         poll,
		PollInterval: cfg.PollInterval,
		OnNotify: func(payload string) {
			if h, ok := parseKeyHash(payload); ok {
				auth.forget(h)
			} else {
				auth.forgetAll(false) // not ours to parse: drop everything
			}
		},
		// Hearing from here on; what was revoked before is read afresh.
		OnHearing:      func() { auth.forgetAll(false) },
		OnDeaf:         func() { auth.forgetAll(true) },
		MinBackoff:     cfg.MinBackoff,
		MaxBackoff:     cfg.MaxBackoff,
		HealthInterval: cfg.HealthInterval,
		Logger:         cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	r.l = l
	r.TestSignals = &l.TestSignals
	return r, nil
}

// Polling reports whether the listener polls rather than LISTENs.
func (r *RevocationListener) Polling() bool { return r.l.Polling() }

// Start turns the Authenticator's cache off until the listener hears
// revocations, and runs the listener until ctx ends or Stop is called. It
// returns at once; a second Start is an error.
func (r *RevocationListener) Start(ctx context.Context) error {
	first := false
	r.once.Do(func() { first = true })
	if !first {
		return errors.New("revocation listener: already started")
	}
	r.auth.forgetAll(true)
	return r.l.Start(ctx)
}

// Stop stops the listener and waits for it; the Authenticator's cache stays
// off. Safe to call twice, and before Start.
func (r *RevocationListener) Stop() { r.l.Stop() }

// WaitListening waits for the listener's first attempt to hear and returns
// its failure: nil means it hears revocations (and the cache is in use
// from then on, unless it loses them again). It does not wait for the
// retries after a failure, so a process that starts while the database is
// away is not held up by them.
func (r *RevocationListener) WaitListening(ctx context.Context) error {
	return r.l.WaitHearing(ctx)
}

// RevocationWindow is how far back a poll looks for revocations: longer
// than any revoking transaction takes to commit (revoked_at is its start,
// RevokeKey is one statement), plus a poll interval, so that no
// revocation's commit falls between two polls' windows.
const RevocationWindow = 2 * time.Minute

// recentRevocationsSQL reads the revocations of the last $1 microseconds
// by the database's clock (migrations/00019 indexes revoked_at).
const recentRevocationsSQL = `
SELECT encode(key_hash, 'hex') FROM api_keys
 WHERE revoked_at > now() - $1 * interval '1 microsecond'`

// newRevocationPoll returns the poll of a listener without a direct
// connection: each call returns the revocations in the window that the
// previous call did not (all of them on the first call), so a key is
// dropped from the cache once, not at every poll.
func newRevocationPoll(q DBTX) func(context.Context) ([]string, error) {
	var seen map[string]bool
	return func(ctx context.Context) ([]string, error) {
		rows, err := q.Query(ctx, recentRevocationsSQL, RevocationWindow.Microseconds())
		if err != nil {
			return nil, fmt.Errorf("poll revocations: %w", err)
		}
		hashes, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("poll revocations: %w", err)
		}
		now := make(map[string]bool, len(hashes))
		var fresh []string
		for _, h := range hashes {
			now[h] = true
			if !seen[h] {
				fresh = append(fresh, h)
			}
		}
		seen = now
		return fresh, nil
	}
}
