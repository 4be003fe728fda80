// Package client is a Go client of phasepay's charges API that retries
// safely.
//
// The rule it is built around: one idempotency key per user intent. Charge
// makes the key once, before anything is sent, and writes it with the
// request to a Journal before the first attempt; every retry, and every
// replay after a crash (ResumePending), sends that same key. The server
// then creates at most one charge however many attempts reach it. A key
// made per attempt would turn every lost response into a second charge.
//
//	c, err := client.New(client.Config{BaseURL: url, APIKey: key, Journal: j})
//	ch, err := c.Charge(ctx, client.ChargeParams{Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa"})
//	switch {
//	case errors.Is(err, client.ErrDeclined):      // final: the card was declined
//	case errors.Is(err, client.ErrPaymentFailed): // final: the PSP refused it
//	case errors.Is(err, client.ErrUnresolved):    // unknown until an operator acts
//	case errors.Is(err, client.ErrGaveUp):        // unknown: ResumePending later
//	}
//	ch, err = c.Capture(ctx, ch.ID, client.CaptureParams{})              // all of it
//	rf, err := c.Refund(ctx, client.RefundParams{Charge: ch.ID, Amount: &n}) // part of it
//	for ch, err := range c.ListCharges(ctx, client.ListParams{Limit: 100}) { … }
package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Defaults of Config.
const (
	MaxElapsedDefault     = 2 * time.Minute
	InitialBackoffDefault = 100 * time.Millisecond
	MaxBackoffDefault     = 5 * time.Second
	// AttemptTimeoutDefault bounds one attempt of the default HTTP client.
	// It is longer than the server's own 30 s bound on a charge run, so
	// that a slow but healthy run is answered rather than abandoned.
	AttemptTimeoutDefault = 40 * time.Second
)

// maxResponseBytes bounds what is read of one response; charges and
// problems are a few hundred bytes.
const maxResponseBytes = 1 << 20

// Config configures a Client. Only BaseURL and APIKey are required.
type Config struct {
	// BaseURL is the API's root, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// APIKey is the tenant's secret key, sent as "Authorization: Bearer".
	APIKey string
	// HTTPClient sends the requests. Nil: a client of its own with
	// AttemptTimeoutDefault per attempt.
	HTTPClient *http.Client
	// Journal keeps intents until they have a final answer. Nil: intents
	// are not persisted, and a crash forgets them (ResumePending then has
	// nothing to do).
	Journal Journal
	// MaxElapsed bounds all attempts of one call, sleeps included; then the
	// call returns an error wrapping ErrGaveUp. Default 2m.
	MaxElapsed time.Duration
	// InitialBackoff is the window of the first retry's jitter; the window
	// doubles per retry up to MaxBackoff. Default 100ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the jitter window. A server's Retry-After may still
	// ask for longer. Default 5s.
	MaxBackoff time.Duration
	// Rand draws the jitter; nil seeds one from crypto/rand. It is used
	// under the client's lock, so it needs no locking of its own. Tests
	// pass a seeded source to make runs repeatable.
	Rand mrand.Source
	// OnAttempt, if set, is called after every attempt of an intent (a
	// charge, capture, void or refund), with
	// the attempt number (from 1), the HTTP status (0 when no answer
	// arrived) and the attempt's error (nil on success). It is called from
	// the goroutine making the call, so it must be safe for concurrent use
	// when the Client is.
	OnAttempt func(intent Intent, attempt int, status int, err error)
	// Logger receives the one thing the client cannot return: a failure
	// to remove a settled intent from the journal. Nil: discarded.
	Logger *slog.Logger
}

// Client is safe for concurrent use.
type Client struct {
	cfg     Config
	base    *url.URL
	http    *http.Client
	journal Journal
	log     *slog.Logger
	// sleep waits between attempts; tests replace it to record the waits.
	sleep func(ctx context.Context, d time.Duration) error

	rngMu sync.Mutex
	rng   *mrand.Rand
}

// New validates cfg, fills its defaults and returns a Client.
func New(cfg Config) (*Client, error) {
	cfg.MaxElapsed = cmp.Or(cfg.MaxElapsed, MaxElapsedDefault)
	cfg.InitialBackoff = cmp.Or(cfg.InitialBackoff, InitialBackoffDefault)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, MaxBackoffDefault)

	base, err := url.Parse(cfg.BaseURL)
	switch {
	case cfg.BaseURL == "":
		return nil, errors.New("client: BaseURL is required")
	case err != nil:
		return nil, fmt.Errorf("client: BaseURL: %w", err)
	case base.Scheme != "http" && base.Scheme != "https", base.Host == "":
		return nil, fmt.Errorf("client: BaseURL %q: want http(s)://host[:port]", cfg.BaseURL)
	case cfg.APIKey == "":
		return nil, errors.New("client: APIKey is required")
	case cfg.MaxElapsed < 0, cfg.InitialBackoff < 0, cfg.MaxBackoff < 0:
		return nil, errors.New("client: MaxElapsed, InitialBackoff and MaxBackoff must not be negative")
	case cfg.MaxBackoff < cfg.InitialBackoff:
		return nil, fmt.Errorf("client: MaxBackoff %s is below InitialBackoff %s", cfg.MaxBackoff, cfg.InitialBackoff)
	}

	c := &Client{cfg: cfg, base: base, http: cfg.HTTPClient, journal: cfg.Journal, log: cfg.Logger, sleep: sleepCtx}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		c.http = &http.Client{Transport: t, Timeout: AttemptTimeoutDefault}
	}
	if c.journal == nil {
		c.journal = noJournal{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	src := cfg.Rand
	if src == nil {
		var seed [32]byte
		_, _ = rand.Read(seed[:]) // never fails (crypto/rand)
		src = mrand.NewChaCha8(seed)
	}
	c.rng = mrand.New(src)
	return c, nil
}

// CloseIdleConnections closes the idle connections of the HTTP client, so
// that a program (or a leak-checking test) can end without stray
// goroutines.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// NewIntent returns an intent for p with a fresh idempotency key: a random
// (version 4) UUID, 122 bits from crypto/rand, so that two intents never
// share a key. It is the only place the package makes a key.
func NewIntent(p ChargeParams) Intent {
	return Intent{Key: uuid.NewString(), Params: p.clone(), CreatedAt: time.Now().UTC()}
}

// Charge creates a charge for a new intent: it makes the intent's key,
// journals the intent, and only then sends it, retrying with that same key
// until a final answer, Config.MaxElapsed or ctx ends.
//
// Errors: ErrDeclined, ErrPaymentFailed, ErrMismatch, ErrInvalidRequest,
// ErrUnauthorized (final, as *Error; the intent leaves the journal);
// ErrUnresolved (as *Error: the server waits for an operator; not retried,
// and the intent stays in the journal); ErrGaveUp or ctx's error (the
// outcome is unknown and the intent stays in the journal for
// ResumePending); a journal error (nothing was sent).
func (c *Client) Charge(ctx context.Context, p ChargeParams) (*Charge, error) {
	r := c.Do(ctx, NewIntent(p))
	return r.Charge, r.Err
}

// Execute is Do for an intent whose answer is a charge (OpCharge,
// OpCapture, OpVoid), for a caller that made the intent with a key of its
// choice (a test harness counting attempts, a program with its own
// journal). It returns the errors of Charge (or Capture, Void).
func (c *Client) Execute(ctx context.Context, in Intent) (*Charge, error) {
	if in.op() == OpRefund {
		return nil, errors.New("execute: a refund intent answers a refund, not a charge: use Do")
	}
	r := c.Do(ctx, in)
	return r.Charge, r.Err
}

// ResumePending replays every journaled intent, oldest first, each with
// its original key, and removes each one that reaches a final answer. It
// returns one Result per intent tried; the error is for the journal being
// unreadable, or ctx ending before every intent was tried (the rest stay
// journaled).
func (c *Client) ResumePending(ctx context.Context) ([]Result, error) {
	var results []Result
	err := c.ResumeEach(ctx, func(_, _ int, r Result) { results = append(results, r) })
	return results, err
}

// ResumeEach is ResumePending for long journals: it calls each with every
// Result as soon as that intent is done (i from 1 of n intents), so that a
// program can show outcomes and progress while the rest are still running.
func (c *Client) ResumeEach(ctx context.Context, each func(i, n int, r Result)) error {
	intents, err := c.journal.List()
	if err != nil {
		return fmt.Errorf("list journal: %w", err)
	}
	slices.SortStableFunc(intents, func(a, b Intent) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for i, in := range intents {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("resume: %d of %d intents left: %w", len(intents)-i, len(intents), err)
		}
		each(i+1, len(intents), c.drive(ctx, in))
	}
	return nil
}

// drive executes a journaled intent and forgets it once it has a final
// answer. An intent without one (gave up, ctx ended, unresolved) stays
// journaled.
func (c *Client) drive(ctx context.Context, in Intent) Result {
	r, settled := c.execute(ctx, in)
	if settled {
		// A failed delete is not returned: the operation is settled, and a
		// caller told otherwise might repeat it under a new key. The
		// stale entry is harmless: ResumePending replays the same key and
		// gets the same answer back.
		if derr := c.journal.Delete(in.Key); derr != nil {
			c.log.WarnContext(ctx, "cannot remove a settled intent from the journal; ResumePending will replay it harmlessly",
				"key", in.Key, "error", derr)
		}
	}
	if r.Err != nil {
		what := string(in.op())
		if id := cmp.Or(in.ChargeID, in.Refund.Charge); id != "" {
			what += " " + id
		}
		r.Charge, r.Refund = nil, nil
		r.Err = fmt.Errorf("%s with idempotency key %s: %w", what, in.Key, r.Err)
	}
	return r
}

// execute sends in until a final answer, with in.Key on every attempt. It
// only retries: it neither makes keys nor touches the journal.
func (c *Client) execute(ctx context.Context, in Intent) (r Result, settled bool) {
	r.Intent = in
	u, body, err := c.request(in)
	if err != nil {
		// Do refuses such an intent before journaling it, so this one was
		// journaled by another version or by hand (an op this version does
		// not know): it stays, reported on every resume, rather than be
		// dropped unsent.
		r.Err = err
		return r, false
	}
	var into answer
	if in.op() == OpRefund {
		r.Refund = &Refund{}
		into = r.Refund
	} else {
		r.Charge = &Charge{}
		into = r.Charge
	}
	settled, r.Err = c.retry(ctx, func(ctx context.Context, n int) outcome {
		o := c.attempt(ctx, http.MethodPost, u, in.Key, body, into)
		if c.cfg.OnAttempt != nil {
			c.cfg.OnAttempt(in, n, o.status, o.err)
		}
		return o
	})
	return r, settled || r.Err == nil
}

// Get reads one charge. It retries like Charge (a read is safe to repeat).
// Errors: ErrNotFound and ErrUnauthorized as *Error; ErrGaveUp; ctx's
// error.
func (c *Client) Get(ctx context.Context, id string) (*Charge, error) {
	u, err := c.objectURL("charge", id, "charges")
	if err != nil {
		return nil, fmt.Errorf("get charge: %w", err)
	}
	var ch Charge
	if err := c.read(ctx, u, &ch); err != nil {
		return nil, fmt.Errorf("get charge %s: %w", id, err)
	}
	return &ch, nil
}

// noJournal is the journal of a Client configured without one.
type noJournal struct{}

func (noJournal) Put(Intent) error        { return nil }
func (noJournal) Delete(string) error     { return nil }
func (noJournal) List() ([]Intent, error) { return nil, nil }
