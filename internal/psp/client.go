package psp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Defaults for the zero fields of ClientConfig.
const (
	AttemptTimeoutDefault = 5 * time.Second
	MaxAttemptsDefault    = 3
	InitialBackoffDefault = 50 * time.Millisecond
	MaxBackoffDefault     = time.Second
)

// maxResponseBytes bounds what is read from the PSP: an authorization is a
// few hundred bytes, and a misbehaving PSP must not make us buffer without
// limit.
const maxResponseBytes = 1 << 20

// errMalformed marks a 2xx (or 1xx/3xx) answer that is not an authorization.
// It is deliberately neither ErrUnavailable nor ErrRejected: the PSP did
// answer, so retrying at once would most likely get the same bytes back, and
// calling it "unavailable" would send operators looking for an outage instead
// of a protocol bug. It is unexported because no caller should branch on it:
// like any unexpected error it is a 500 for the caller, and the charge stays
// at its recovery point, where a later retry with the same key is still safe.
var errMalformed = errors.New("malformed psp response")

// ClientConfig configures a Client. Zero fields take the defaults above.
type ClientConfig struct {
	// BaseURL is the PSP's absolute http(s) URL, e.g. http://127.0.0.1:8090.
	// Required. A path is kept: requests go to {BaseURL}/v1/authorizations.
	BaseURL string
	// HTTPClient sends the requests. Nil means a client of this package's own
	// (on http.DefaultTransport, refusing redirects). Callers may pass one
	// whose Transport is wrapped, e.g. by otelhttp; its Timeout, if any, is
	// applied on top of AttemptTimeout.
	HTTPClient *http.Client
	// AttemptTimeout bounds one attempt, from sending the request to reading
	// the whole response. Default 5s.
	AttemptTimeout time.Duration
	// MaxAttempts is the number of attempts in total, including the first.
	// Default 3; 1 disables retries.
	MaxAttempts int
	// InitialBackoff is the pause before the second attempt; later pauses
	// double, each randomized by ±50% so that clients that failed together do
	// not retry together. Default 50ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the pause between attempts (before randomization).
	// Default 1s.
	MaxBackoff time.Duration
}

// Client calls the PSP. It is safe for concurrent use.
type Client struct {
	cfg      ClientConfig
	endpoint string
}

// NewClient fills in the defaults of cfg and validates it.
func NewClient(cfg ClientConfig) (*Client, error) {
	cfg.AttemptTimeout = cmp.Or(cfg.AttemptTimeout, AttemptTimeoutDefault)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, MaxAttemptsDefault)
	cfg.InitialBackoff = cmp.Or(cfg.InitialBackoff, InitialBackoffDefault)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, MaxBackoffDefault)

	if cfg.BaseURL == "" {
		return nil, errors.New("psp client: BaseURL is required")
	}
	base, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("psp client: BaseURL: %w", err)
	}
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("psp client: BaseURL %q: must be an absolute http or https URL", cfg.BaseURL)
	}
	switch {
	case cfg.AttemptTimeout < 0:
		return nil, fmt.Errorf("psp client: AttemptTimeout %s: must not be negative", cfg.AttemptTimeout)
	case cfg.MaxAttempts < 0:
		return nil, fmt.Errorf("psp client: MaxAttempts %d: must not be negative", cfg.MaxAttempts)
	case cfg.InitialBackoff < 0:
		return nil, fmt.Errorf("psp client: InitialBackoff %s: must not be negative", cfg.InitialBackoff)
	case cfg.MaxBackoff < cfg.InitialBackoff:
		return nil, fmt.Errorf("psp client: MaxBackoff %s: must not be below InitialBackoff %s", cfg.MaxBackoff, cfg.InitialBackoff)
	}

	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{
			// A redirect of a POST may be replayed as a GET (301, 302) or
			// without the caller knowing where it went; a PSP that redirects
			// an authorization is misconfigured, so surface it instead.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Client{cfg: cfg, endpoint: base.JoinPath("v1", "authorizations").String()}, nil
}

// Authorize asks the PSP to authorize req. A decline is not an error: it
// comes back as an Authorization with Status StatusDeclined.
//
// Attempts that fail transiently (5xx, AttemptTimeout, a connection error or
// a connection dropped before the answer) are retried with exponential
// backoff and jitter, up to MaxAttempts and while ctx lasts, always with the
// same idempotency key: whichever attempt the PSP processed first decides the
// result, and the others replay it.
//
// Errors:
//   - ErrUnavailable: every attempt failed transiently, or ctx's deadline
//     passed (the error then also matches context.DeadlineExceeded). The
//     authorization may exist at the PSP; retry later with the same key.
//   - ErrRejected: a 4xx, not retried; the error holds the status and body.
//   - context.Canceled: ctx was canceled; the caller gave up, which says
//     nothing about the PSP, so this is not ErrUnavailable.
//   - anything else is permanent: a missing key, or an answer that is not an
//     authorization (see errMalformed).
func (c *Client) Authorize(ctx context.Context, req AuthorizeRequest) (Authorization, error) {
	if req.IdempotencyKey == "" {
		return Authorization{}, errors.New("authorize: idempotency key is required")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Authorization{}, fmt.Errorf("authorize %s: encode request: %w", req.IdempotencyKey, err)
	}

	var (
		attempts  int
		last      error
		permanent bool
	)
	op := func() (Authorization, error) {
		attempts++
		auth, err := c.attempt(ctx, req.IdempotencyKey, body)
		last = err
		var perm *backoff.PermanentError
		if permanent = errors.As(err, &perm); permanent {
			last = perm.Err
		}
		return auth, err
	}
	auth, err := backoff.Retry(ctx, op,
		backoff.WithBackOff(&backoff.ExponentialBackOff{
			InitialInterval:     c.cfg.InitialBackoff,
			RandomizationFactor: 0.5,
			Multiplier:          2,
			MaxInterval:         c.cfg.MaxBackoff,
		}),
		backoff.WithMaxTries(uint(c.cfg.MaxAttempts)),
		// ctx and MaxAttempts bound the call; the library's own 15-minute
		// default would only be a third, surprising limit.
		backoff.WithMaxElapsedTime(0),
	)
	switch {
	case err == nil:
		return auth, nil
	case permanent:
		// Keep the PSP's definite answer even if ctx ended just after it.
		return Authorization{}, fmt.Errorf("authorize %s: %w", req.IdempotencyKey, last)
	case ctx.Err() != nil:
		// backoff.Retry returns the bare context error when ctx ends between
		// attempts; what the last attempt saw is kept for the log.
		return Authorization{}, fmt.Errorf("authorize %s: after %d attempts: %w", req.IdempotencyKey, attempts, contextError(ctx, last))
	default:
		return Authorization{}, fmt.Errorf("authorize %s: after %d attempts: %w", req.IdempotencyKey, attempts, err)
	}
}

// attempt makes one request. Transient failures wrap ErrUnavailable; the
// others are wrapped in backoff.Permanent so that Retry stops.
func (c *Client) attempt(ctx context.Context, key string, body []byte) (Authorization, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()

	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return Authorization{}, backoff.Permanent(fmt.Errorf("build request: %w", err))
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "application/json")
	httpReq.Header.Set("Idempotency-Key", key)

	resp, err := c.cfg.HTTPClient.Do(httpReq)
	if err != nil {
		// Whether the PSP got the request or not (refused, reset, EOF before
		// the answer, attempt timeout), sending it again under the same key
		// is harmless, so every transport error is worth another attempt.
		return Authorization{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer resp.Body.Close()

	// The body is read whole inside the attempt's timeout, so a connection
	// dropped halfway through the answer is a transient failure too.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return Authorization{}, fmt.Errorf("%w: read response (status %d): %w", ErrUnavailable, resp.StatusCode, err)
	}

	switch code := resp.StatusCode; {
	case code >= 500:
		return Authorization{}, fmt.Errorf("%w: status %d: %s", ErrUnavailable, code, snippet(raw))
	case code >= 400:
		return Authorization{}, backoff.Permanent(fmt.Errorf("%w: status %d: %s", ErrRejected, code, snippet(raw)))
	case code >= 200 && code < 300:
		auth, err := decodeAuthorization(raw)
		if err != nil {
			return Authorization{}, backoff.Permanent(fmt.Errorf("status %d: %w", code, err))
		}
		return auth, nil
	default:
		return Authorization{}, backoff.Permanent(fmt.Errorf("%w: unexpected status %d: %s", errMalformed, code, snippet(raw)))
	}
}

// decodeAuthorization parses and checks a 2xx body; a zero Authorization
// must never pass for a real one.
func decodeAuthorization(raw []byte) (Authorization, error) {
	var auth Authorization
	if err := json.Unmarshal(raw, &auth); err != nil {
		return Authorization{}, fmt.Errorf("%w: %w: %s", errMalformed, err, snippet(raw))
	}
	if auth.ID == "" {
		return Authorization{}, fmt.Errorf("%w: empty id: %s", errMalformed, snippet(raw))
	}
	if auth.Status != StatusAuthorized && auth.Status != StatusDeclined {
		return Authorization{}, fmt.Errorf("%w: unknown status %q", errMalformed, auth.Status)
	}
	return auth, nil
}

// contextError explains why the call ended when ctx did. Running out of time
// is the PSP not answering in time, hence ErrUnavailable; a cancellation is
// the caller leaving, which says nothing about the PSP.
func contextError(ctx context.Context, last error) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, err) {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if last != nil {
		// %v, not %w: the last attempt's error may wrap ErrUnavailable, which
		// a cancellation must not inherit.
		err = fmt.Errorf("%w (last attempt: %v)", err, last)
	}
	return err
}

// snippet keeps error messages one short line even when the PSP answers
// with a page of HTML.
func snippet(raw []byte) string {
	const limit = 256
	s := string(bytes.TrimSpace(raw))
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
