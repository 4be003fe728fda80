// Package dbnotify tells a process of changes other processes commit:
// through LISTEN on a connection to the server itself where there is one,
// by polling where only a transaction pooler is reachable. It is the one
// place that choice is made, for both of phasepay's listeners: the api's
// key revocations (internal/tenants) and the webhook deliverer's wake-ups
// (internal/webhooks).
//
// Why not LISTEN through the pooler: a LISTEN lives in its session, and a
// transaction pooler (PgBouncer in transaction mode) gives each
// transaction whichever server connection is free. The LISTEN lands on one
// server connection, which goes back to the pooler's pool when its
// transaction ends; the notifications arrive on it while other clients
// use it and are lost, and the listener waits on a client connection that
// hears nothing, silently. A pool's own connections are no better without
// a pooler: a pooled session would hear notifications meant for nobody and
// lose them when it is recycled.
//
// A Listener reports what it hears with three callbacks: OnNotify for each
// change, OnHearing each time it starts hearing every change (LISTEN in
// place, or a poll that succeeded), OnDeaf each time changes may go
// unheard (a lost connection, a failed poll). A caller whose correctness
// depends on every change (a cache of API keys) stops trusting what it
// knows between OnDeaf and OnHearing.
package dbnotify

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

	"github.com/phasepay/phasepay/internal/testsignal"
)

// Defaults of Config.
const (
	PollIntervalDefault   = 250 * time.Millisecond
	MinBackoffDefault     = 100 * time.Millisecond
	MaxBackoffDefault     = 5 * time.Second
	HealthIntervalDefault = 10 * time.Second
)

// pingTimeout bounds the health check of a quiet connection: a live server
// answers it in milliseconds.
const pingTimeout = 5 * time.Second

// Config configures a Listener.
type Config struct {
	// Name names the listener in its log lines ("api key revocations").
	Name string
	// Channel is the notification channel LISTENed on.
	Channel string
	// Connect opens a connection of the listener's own to the server
	// itself: never one of a pool, nor one through a transaction pooler
	// (see the package comment). Nil: the listener polls.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Poll, when Connect is nil, returns the payloads of the changes
	// committed since its previous call. A change may be returned more
	// than once; none may be missed. Nil: each PollInterval is one
	// notification with an empty payload (for a caller whose own scan is
	// the poll).
	Poll func(ctx context.Context) ([]string, error)
	// PollInterval is the pause between two polls: how late a change is
	// heard without LISTEN. Default PollIntervalDefault.
	PollInterval time.Duration
	// OnNotify receives the payload of each change heard. Required.
	OnNotify func(payload string)
	// OnHearing is called each time the listener starts hearing every
	// change; changes before it may have gone unheard. Optional.
	OnHearing func()
	// OnDeaf is called each time changes may start going unheard, and
	// after every failed attempt to hear them. Optional.
	OnDeaf func()
	// MinBackoff is the pause before reconnecting after the connection
	// is lost; it doubles, with jitter, up to MaxBackoff while
	// reconnecting fails. Defaults MinBackoffDefault, MaxBackoffDefault.
	MinBackoff, MaxBackoff time.Duration
	// HealthInterval: after this long without a notification the
	// listener pings its connection, so that a connection lost without
	// the client noticing (a network partition, no RST) is found within
	// about this long (plus a 5 s ping timeout) rather than after the
	// kernel's TCP timeouts. Default HealthIntervalDefault.
	HealthInterval time.Duration
	// Logger receives losses (Warn) and recoveries (Info). Default none.
	Logger *slog.Logger
}

// Listener hears the changes of one channel; see the package comment.
type Listener struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	// firstTry is closed when the first attempt to hear has succeeded or
	// failed; firstErr is its failure.
	firstTry chan struct{}
	firstErr error

	// TestSignals are no-ops until a test calls their Init, before Start.
	TestSignals TestSignals
}

// TestSignals are the points of a Listener's work a test may wait on.
type TestSignals struct {
	// Hearing fires each time the listener starts hearing every change.
	Hearing testsignal.Signal[struct{}]
	// Deaf fires each time changes may start going unheard.
	Deaf testsignal.Signal[struct{}]
	// Notified carries each payload once OnNotify has returned.
	Notified testsignal.Signal[string]
	// Polled fires after each poll, successful or not.
	Polled testsignal.Signal[struct{}]
	// HealthChecked carries the outcome of each ping of a quiet connection.
	HealthChecked testsignal.Signal[error]
}

// Init arms every signal for t.
func (ts *TestSignals) Init(t testsignal.TB) {
	ts.Hearing.Init(t)
	ts.Deaf.Init(t)
	ts.Notified.Init(t)
	ts.Polled.Init(t)
	ts.HealthChecked.Init(t)
}

// hearing calls OnHearing and signals it.
func (l *Listener) hearing() {
	l.cfg.OnHearing()
	l.TestSignals.Hearing.Signal(struct{}{})
}

// deaf calls OnDeaf and signals it.
func (l *Listener) deaf() {
	l.cfg.OnDeaf()
	l.TestSignals.Deaf.Signal(struct{}{})
}

// notify calls OnNotify and signals it.
func (l *Listener) notify(payload string) {
	l.cfg.OnNotify(payload)
	l.TestSignals.Notified.Signal(payload)
}

// New validates cfg, fills its defaults and returns a Listener; Start
// runs it.
func New(cfg Config) (*Listener, error) {
	switch {
	case cfg.OnNotify == nil:
		return nil, fmt.Errorf("%s listener: OnNotify is required", cfg.Name)
	case cfg.Connect != nil && cfg.Channel == "":
		return nil, fmt.Errorf("%s listener: Channel is required to LISTEN", cfg.Name)
	case cfg.MinBackoff < 0 || cfg.MaxBackoff < 0 || cfg.HealthInterval < 0 || cfg.PollInterval < 0:
		return nil, fmt.Errorf("%s listener: negative backoff, health or poll interval", cfg.Name)
	}
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, MinBackoffDefault)
	cfg.MaxBackoff = max(cmp.Or(cfg.MaxBackoff, MaxBackoffDefault), cfg.MinBackoff)
	cfg.HealthInterval = cmp.Or(cfg.HealthInterval, HealthIntervalDefault)
	if cfg.OnHearing == nil {
		cfg.OnHearing = func() {}
	}
	if cfg.OnDeaf == nil {
		cfg.OnDeaf = func() {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Listener{cfg: cfg, log: cfg.Logger, firstTry: make(chan struct{})}, nil
}

// Polling reports whether the listener polls (no direct connection)
// rather than LISTENs.
func (l *Listener) Polling() bool { return l.cfg.Connect == nil }

// Start runs the listener until ctx ends or Stop is called. It returns at
// once; a second Start is an error.
func (l *Listener) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return fmt.Errorf("%s listener: already started", l.cfg.Name)
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		// Stopped: nothing is heard any more.
		defer l.deaf()
		if l.Polling() {
			l.poll(ctx)
		} else {
			l.listenLoop(ctx)
		}
	}()
	return nil
}

// Stop stops the listener and waits for it. Safe to call twice, and
// before Start.
func (l *Listener) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// WaitHearing waits for the listener's first attempt to hear and returns
// its failure: nil means it hears every change from then on (unless it
// loses them again). It does not wait for the retries after a failure, so
// a process that starts while the database is away is not held up.
func (l *Listener) WaitHearing(ctx context.Context) error {
	select {
	case <-l.firstTry:
		if l.firstErr != nil {
			return fmt.Errorf("%s listener: not hearing yet: %w", l.cfg.Name, l.firstErr)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s listener: not hearing yet: %w", l.cfg.Name, context.Cause(ctx))
	}
}

// firstTried records the outcome of the first attempt (later ones are
// ignored).
func (l *Listener) firstTried(err error) {
	select {
	case <-l.firstTry:
	default:
		l.firstErr = err
		close(l.firstTry)
	}
}

// poll calls Poll every PollInterval. A failed poll makes the listener
// deaf until one succeeds again: a change committed meanwhile is returned
// by the next successful poll, since Poll reports what changed since its
// previous successful call.
func (l *Listener) poll(ctx context.Context) {
	hearing := false
	t := time.NewTicker(l.cfg.PollInterval)
	defer t.Stop()
	for {
		payloads, err := l.pollOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			l.firstTried(err)
			if hearing {
				l.log.Warn(l.cfg.Name+": poll failed; changes unheard until one succeeds", "error", err.Error())
			}
			hearing = false
			l.deaf()
		default:
			if !hearing {
				hearing = true
				l.hearing()
				l.log.Info(l.cfg.Name+": polling (no direct connection to LISTEN on)", "interval", l.cfg.PollInterval.String())
			}
			l.firstTried(nil)
			for _, p := range payloads {
				l.notify(p)
			}
		}
		l.TestSignals.Polled.Signal(struct{}{})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (l *Listener) pollOnce(ctx context.Context) ([]string, error) {
	if l.cfg.Poll == nil {
		return []string{""}, nil
	}
	return l.cfg.Poll(ctx)
}

// listenLoop listens, and reconnects with backoff for as long as the
// listener runs (a PostgreSQL restart, a terminated backend).
func (l *Listener) listenLoop(ctx context.Context) {
	backoff := l.cfg.MinBackoff
	for {
		began := time.Now()
		up, err := l.listen(ctx)
		l.firstTried(err)
		l.deaf()
		if ctx.Err() != nil {
			return
		}
		if up && time.Since(began) > l.cfg.MaxBackoff {
			// A fresh loss after a while of listening, not a connection
			// that fails again as soon as it is made.
			backoff = l.cfg.MinBackoff
		}
		// Half the backoff at random, so that the processes do not all
		// reconnect at the same instant after a restart.
		pause := backoff/2 + rand.N(backoff/2+1)
		l.log.Warn(l.cfg.Name+": connection lost; changes unheard until it is back",
			"error", err.Error(), "retry_in", pause.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		backoff = min(2*backoff, l.cfg.MaxBackoff)
	}
}

// listen opens a connection, LISTENs and reports notifications until the
// connection fails or ctx ends. up reports whether it got as far as
// listening.
func (l *Listener) listen(ctx context.Context) (up bool, err error) {
	conn, err := l.cfg.Connect(ctx)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	// LISTEN takes effect when it returns: every change committed later
	// is notified.
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.cfg.Channel}.Sanitize()); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	l.hearing()
	l.firstTried(nil)
	l.log.Info(l.cfg.Name+": listening", "channel", l.cfg.Channel)
	for {
		waitCtx, cancel := context.WithTimeout(ctx, l.cfg.HealthInterval)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			l.notify(n.Payload)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// Quiet for HealthInterval: check the connection is alive. A
			// timeout leaves a pgx connection usable.
			pingCtx, cancel := context.WithTimeout(ctx, pingTimeout)
			err := conn.Ping(pingCtx)
			cancel()
			l.TestSignals.HealthChecked.Signal(err)
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
		default:
			return true, fmt.Errorf("wait for notification: %w", err)
		}
	}
}
