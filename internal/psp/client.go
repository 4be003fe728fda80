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

// errMalformed marks an answer that is not what the PSP's API promises: a
// 2xx that is not an authorization, a 1xx or 3xx. Its class is unknown (it
// also wraps ErrUnavailable): the PSP may have acted, and only a lookup by
// reference can tell. It is unexported because callers branch on the class,
// not on why it is unknown.
var errMalformed = errors.New("malformed psp response")

// defaultTransport is shared by the clients built without an HTTPClient, as
// http.DefaultTransport would be: one pool of connections per process.
var defaultTransport = NewTransport()

// ClientConfig configures a Client. Zero fields take the defaults above.
type ClientConfig struct {
	// BaseURL is the PSP's absolute http(s) URL, e.g. http://127.0.0.1:8090.
	// Required. A path is kept: requests go to {BaseURL}/v1/authorizations.
	BaseURL string
	// HTTPClient sends the requests. Nil means a client on this package's
	// Transport (which never resends a request by itself), refusing
	// redirects. A caller passing its own must build its transport on
	// NewTransport (wrapped, e.g. by otelhttp, as it likes): a plain
	// http.Transport resends lookups, and other requests built without this
	// client, on its own. Its Timeout, if any, applies on top of
	// AttemptTimeout.
	HTTPClient *http.Client
	// AttemptTimeout bounds one request, from sending it to reading the
	// whole answer; a timeout is an unknown outcome. Default 5s.
	AttemptTimeout time.Duration
	// MaxAttempts is how many times one call of AuthorizeOutcome may send
	// the authorization in total, including the first, while busy or
	// unknown outcomes (each followed by a lookup) leave it unsettled.
	// Default 3; 1 sends once and settles an unknown outcome only by a
	// lookup.
	MaxAttempts int
	// InitialBackoff is the pause after the first unsettled send; later
	// pauses double, each randomized by ±50% so that clients that failed
	// together do not retry together. Default 50ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the pause between sends (before randomization). It is
	// also the longest the call waits for a busy PSP: a Retry-After beyond
	// it ends the call as busy, for the caller's schedule to honour.
	// Default 1s.
	MaxBackoff time.Duration
}

// Client calls the PSP. It is safe for concurrent use.
//
// Its methods come in two layers. AuthorizeOnce and Lookup each send one
// request and classify its answer: the primitives. AuthorizeOutcome
// composes them into the contract's rule for one attempt of the state
// machine (look up before resending), and Authorize is AuthorizeOutcome
// for callers that want only an authorization or an error. Captures, voids
// and refunds have the same pair: OperateOnce and LookupOperations, and
// OperateOutcome over the same rule (client_operations.go).
type Client struct {
	cfg      ClientConfig
	base     *url.URL
	endpoint string // {BaseURL}/v1/authorizations
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
	// The URL is never quoted whole: it may carry credentials (RedactURL).
	base, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, errors.New("psp client: BaseURL does not parse as a URL")
	}
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("psp client: BaseURL %q: must be an absolute http or https URL", RedactURL(cfg.BaseURL))
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
		cfg.HTTPClient = NewHTTPClient(defaultTransport)
	}
	return &Client{cfg: cfg, base: base, endpoint: base.JoinPath("v1", "authorizations").String()}, nil
}

// NewHTTPClient returns an http.Client for PSP requests on rt, which
// should be a Transport, possibly wrapped. It follows no redirect: a
// redirect of a POST may be replayed as a GET (301, 302) or sent somewhere
// nobody chose; a PSP that redirects is misconfigured, and the 3xx is
// surfaced as an unknown outcome instead.
func NewHTTPClient(rt http.RoundTripper) *http.Client {
	return &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// AuthorizeOnce sends req once, exactly: no retry, no lookup. It is the
// primitive under AuthorizeOutcome, for callers that apply the contract's
// rule themselves. The Outcome's class is always set; the error is nil for
// a success and a decline, and otherwise wraps the class's sentinel
// (ErrRejected, ErrBusy, ErrUnavailable), or context.Canceled when ctx was
// canceled (the caller left: the class is unknown, but the PSP is not known
// to be at fault).
func (c *Client) AuthorizeOnce(ctx context.Context, req AuthorizeRequest) (Outcome, error) {
	if req.IdempotencyKey == "" {
		return Outcome{}, errors.New("authorize: idempotency key is required")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Outcome{}, fmt.Errorf("authorize %s: encode request: %w", req.IdempotencyKey, err)
	}
	out, err := c.send(ctx, req, body)
	if err != nil {
		return out, fmt.Errorf("authorize %s: %w", req.IdempotencyKey, err)
	}
	return out, nil
}

// send is AuthorizeOnce with the body already encoded.
func (c *Client) send(ctx context.Context, req AuthorizeRequest, body []byte) (Outcome, error) {
	ans := c.do(ctx, http.MethodPost, c.endpoint, req.IdempotencyKey, body)
	out := Outcome{StatusCode: ans.status, Sent: 1}
	var result string
	if ans.err == nil && ans.status >= 200 && ans.status < 300 {
		out.Authorization, ans.err = decodeAuthorization(ans.body, req.Reference)
		result = out.Authorization.Status
	}
	out.Class = Classify(ans.status, result, ans.err)
	return finishOutcome(ctx, out, ans)
}

// Lookup asks the PSP for every authorization it made for reference (a
// charge id), by GET {BaseURL}/v1/authorizations?reference=, in the PSP's
// order. The PSP remembers them for ever, unlike idempotency keys, which
// is why a lookup, not a resend, is how an unknown outcome is settled.
//
// An empty list means the PSP holds no authorization for reference: a
// request whose answer was lost was not acted on, and sending it again is
// safe. Any failure wraps ErrUnavailable (the outcome stays unknown), or
// context.Canceled when ctx was canceled.
func (c *Client) Lookup(ctx context.Context, reference string) ([]Authorization, error) {
	var list []Authorization
	if err := c.lookup(ctx, c.endpoint, reference, &list); err != nil {
		return nil, err
	}
	for _, a := range list {
		if err := checkAuthorization(a, reference); err != nil {
			return nil, fmt.Errorf("lookup %s: %w", reference, malformed(err))
		}
	}
	return list, nil
}

// lookup makes one GET endpoint?reference= and decodes its {"data": [...]}
// into list, a pointer to a slice; errors as Lookup's.
func (c *Client) lookup(ctx context.Context, endpoint, reference string, list any) error {
	if reference == "" {
		return errors.New("lookup: reference is required")
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("lookup %s: %w", reference, err)
	}
	// Added to the query the base URL may have, not appended after it.
	q := u.Query()
	q.Set("reference", reference)
	u.RawQuery = q.Encode()
	ans := c.do(ctx, http.MethodGet, u.String(), "", nil)
	if ans.err != nil || ans.status != http.StatusOK {
		return fmt.Errorf("lookup %s: %w", reference, ans.unknown(ctx))
	}
	var page struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(ans.body, &page); err != nil || len(page.Data) == 0 || page.Data[0] != '[' {
		return fmt.Errorf("lookup %s: %w", reference, malformed(fmt.Errorf("%w: not a list: %s", errMalformed, snippet(ans.body))))
	}
	if err := json.Unmarshal(page.Data, list); err != nil {
		return fmt.Errorf("lookup %s: %w", reference, malformed(fmt.Errorf("%w: %w", errMalformed, err)))
	}
	return nil
}

// malformed is the unknown outcome of an answer that is not what the PSP's
// API promises (cause wraps errMalformed).
func malformed(cause error) *Failure {
	return &Failure{Class: ClassUnknown, Public: ReasonMalformed, Err: fmt.Errorf("%w: %w", ErrUnavailable, cause)}
}

// answer is one HTTP exchange, before it is classified.
type answer struct {
	status     int // 0 if none arrived
	body       []byte
	retryAfter time.Duration
	err        error // sending, or reading the whole answer
}

// unknown is the error of an exchange whose outcome is unknown: a
// *Failure whose public words are classified from the exchange (status and
// error), never from the text of its error. A canceled ctx is the caller
// leaving, which says nothing about the PSP, so it is not ErrUnavailable; a
// deadline is the PSP not answering in time, so it is.
func (a answer) unknown(ctx context.Context) *Failure {
	cause := a.err
	if cause == nil {
		cause = fmt.Errorf("status %d: %s", a.status, snippet(a.body))
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		err := ctx.Err()
		if c := context.Cause(ctx); c != nil && !errors.Is(c, err) {
			err = fmt.Errorf("%w: %w", err, c)
		}
		// %v: the exchange's error must not make a cancellation look like
		// a PSP failure.
		return &Failure{Class: ClassUnknown, Public: ReasonInterrupted, Err: fmt.Errorf("%w (%v)", err, cause)}
	}
	return &Failure{Class: ClassUnknown, Public: publicReason(ctx, ClassUnknown, a.status, a.err),
		Err: fmt.Errorf("%w: %w", ErrUnavailable, cause)}
}

// do makes one request, reading the whole answer inside AttemptTimeout, so
// that an answer cut short is an error here rather than a half-read body.
func (c *Client) do(ctx context.Context, method, u, key string, body []byte) answer {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()

	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return answer{err: fmt.Errorf("build request: %w", err)}
	}
	// Belt and braces with Transport: without GetBody net/http cannot
	// resend the request on its own, whatever transport a caller passed.
	req.GetBody = nil
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}

	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		// net/http's *url.Error quotes the URL with its query and user
		// name: the raw cause names the PSP by its redacted URL instead.
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			err = uerr.Err
		}
		return answer{err: fmt.Errorf("%s %s: %w", method, RedactURL(u), err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return answer{status: resp.StatusCode, err: fmt.Errorf("read answer (status %d): %w", resp.StatusCode, err)}
	}
	a := answer{status: resp.StatusCode, body: raw}
	if a.status == http.StatusConflict || a.status == http.StatusTooManyRequests {
		a.retryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	if a.status < 200 || (a.status >= 300 && a.status < 400) {
		a.err = fmt.Errorf("%w: unexpected status %d: %s", errMalformed, a.status, snippet(raw))
	}
	return a
}

// decodeAuthorization parses and checks a 2xx body; a zero Authorization
// must never pass for a real one.
func decodeAuthorization(raw []byte, reference string) (Authorization, error) {
	var auth Authorization
	if err := json.Unmarshal(raw, &auth); err != nil {
		return Authorization{}, fmt.Errorf("%w: %w: %s", errMalformed, err, snippet(raw))
	}
	if err := checkAuthorization(auth, reference); err != nil {
		return Authorization{}, err
	}
	return auth, nil
}

// checkAuthorization rejects an authorization this service could not record
// faithfully, or one made for another charge.
func checkAuthorization(auth Authorization, reference string) error {
	switch {
	case auth.ID == "":
		return fmt.Errorf("%w: empty id", errMalformed)
	case auth.Status != StatusAuthorized && auth.Status != StatusDeclined:
		return fmt.Errorf("%w: unknown status %q", errMalformed, auth.Status)
	case auth.Reference != "" && auth.Reference != reference:
		return fmt.Errorf("%w: authorization %s is for %q, not %q", errMalformed, auth.ID, auth.Reference, reference)
	}
	return nil
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
