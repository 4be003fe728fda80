package tenants

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ListenerApplicationName is the application_name of a listener's
// connection, so that an operator (and a test) can find it in
// pg_stat_activity.
const ListenerApplicationName = "phasepay-api-keys-listener"

// Defaults of RevocationListenerConfig.
const (
	MinBackoffDefault     = 100 * time.Millisecond
	MaxBackoffDefault     = 5 * time.Second
	HealthIntervalDefault = 10 * time.Second
)

// pingTimeout bounds the health check of a quiet connection: a live server
// answers it in milliseconds.
const pingTimeout = 5 * time.Second

// listenSQL subscribes the session to revocations (RevokeKey). It takes
// effect when it returns: every revocation committed later is delivered.
const listenSQL = `LISTEN ` + RevocationChannel

// RevocationListenerConfig configures a RevocationListener.
type RevocationListenerConfig struct {
	// Connect opens the listener's own connection, never one of a pool: a
	// LISTEN lives as long as its session, and a pooled session would hear
	// notifications meant for nobody and lose them when it is recycled.
	// Give it application_name ListenerApplicationName.
	Connect func(ctx context.Context) (*pgx.Conn, error)
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

// RevocationListener keeps an Authenticator's cache true to revocations: it
// LISTENs for them on a dedicated connection and drops each revoked key from
// the cache as its notification arrives.
//
// Notifications sent while the connection is down are lost, PostgreSQL
// does not queue them for a session that is gone. So from the moment the
// connection is lost until a new LISTEN is in place the Authenticator does
// not use its cache, and the cache is emptied when listening resumes: a key
// revoked in between is looked up afresh, and refused. The connection is
// reopened with backoff for as long as the listener runs (a PostgreSQL
// restart, a terminated backend).
type RevocationListener struct {
	cfg  RevocationListenerConfig
	auth *Authenticator
	log  *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	// firstTry is closed when the first attempt to listen has listened
	// or failed; firstErr is its failure.
	firstTry chan struct{}
	firstErr error
}

// NewRevocationListener returns a listener for auth; Start runs it.
func NewRevocationListener(auth *Authenticator, cfg RevocationListenerConfig) (*RevocationListener, error) {
	if cfg.Connect == nil {
		return nil, errors.New("revocation listener: Connect is required")
	}
	if cfg.MinBackoff < 0 || cfg.MaxBackoff < 0 || cfg.HealthInterval < 0 {
		return nil, errors.New("revocation listener: negative backoff or health interval")
	}
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, MinBackoffDefault)
	cfg.MaxBackoff = max(cmp.Or(cfg.MaxBackoff, MaxBackoffDefault), cfg.MinBackoff)
	cfg.HealthInterval = cmp.Or(cfg.HealthInterval, HealthIntervalDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &RevocationListener{cfg: cfg, auth: auth, log: cfg.Logger, firstTry: make(chan struct{})}, nil
}

// Start turns the Authenticator's cache off until the listener listens,
// and runs the listener until ctx ends or Stop is called. It returns at
// once; a second Start is an error.
func (l *RevocationListener) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return errors.New("revocation listener: already started")
	}
	l.auth.forgetAll(true)
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go l.run(ctx)
	return nil
}

// Stop stops the listener and waits for it; the Authenticator's cache stays
// off. Safe to call twice, and before Start.
func (l *RevocationListener) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// WaitListening waits for the listener's first attempt to listen and
// returns its failure: nil means it listens (and the cache is in use from
// then on, unless the connection is lost again). It does not wait for the
// retries after a failure, so a process that starts while the database is
// away is not held up by them.
func (l *RevocationListener) WaitListening(ctx context.Context) error {
	select {
	case <-l.firstTry:
		if l.firstErr != nil {
			return fmt.Errorf("revocation listener: not listening yet: %w", l.firstErr)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("revocation listener: not listening yet: %w", context.Cause(ctx))
	}
}

func (l *RevocationListener) run(ctx context.Context) {
	defer close(l.done)
	var once sync.Once
	firstTried := func(err error) {
		once.Do(func() {
			l.firstErr = err
			close(l.firstTry)
		})
	}
	backoff := l.cfg.MinBackoff
	for {
		began := time.Now()
		up, err := l.listen(ctx, func() { firstTried(nil) })
		firstTried(err)
		l.auth.forgetAll(true)
		if ctx.Err() != nil {
			return
		}
		if up && time.Since(began) > l.cfg.MaxBackoff {
			// A fresh loss after a while of listening, not a connection
			// that fails again as soon as it is made.
			backoff = l.cfg.MinBackoff
		}
		// Half the backoff at random, so that the api processes do not
		// all reconnect at the same instant after a restart.
		pause := backoff/2 + rand.N(backoff/2+1)
		l.log.Warn("api key revocation listener: connection lost; key cache off until it is back",
			"error", err.Error(), "retry_in", pause.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		backoff = min(2*backoff, l.cfg.MaxBackoff)
	}
}

// listen opens a connection, LISTENs and evicts revoked keys until the
// connection fails or ctx ends. up reports whether it got as far as
// listening.
func (l *RevocationListener) listen(ctx context.Context, listened func()) (up bool, err error) {
	conn, err := l.cfg.Connect(ctx)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, listenSQL); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	// Listening from here on; what was revoked before is read afresh.
	l.auth.forgetAll(false)
	listened()
	l.log.Info("api key revocation listener: listening", "channel", RevocationChannel)
	for {
		waitCtx, cancel := context.WithTimeout(ctx, l.cfg.HealthInterval)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			if h, ok := parseKeyHash(n.Payload); ok {
				l.auth.forget(h)
			} else {
				l.auth.forgetAll(false) // not ours to parse: drop everything
			}
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// Quiet for HealthInterval: check the connection is alive. A
			// timeout leaves a pgx connection usable.
			pingCtx, cancel := context.WithTimeout(ctx, pingTimeout)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
		default:
			return true, fmt.Errorf("wait for notification: %w", err)
		}
	}
}
