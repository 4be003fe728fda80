package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"
)

// userAgent names the client in the server's logs.
const userAgent = "phasepay-go-client/1"

// errProtocol marks a success status whose body is not the object asked
// for: the server answered finally, so retrying would only fetch the same
// bytes again.
var errProtocol = errors.New("unexpected response")

// answer is what a 2xx response is decoded into: a *Charge, a *Refund or a
// page of a list.
type answer interface {
	// decode reads a 2xx body; it reports false when the body is not the
	// object this answer is.
	decode(raw []byte, replayed bool) bool
	// kind names the object for errors ("a charge").
	kind() string
}

// attempt sends one request and, on a 2xx, decodes the body into into. key,
// when set, is sent as the Idempotency-Key; attempt never makes one.
func (c *Client) attempt(ctx context.Context, method, url, key string, body []byte, into answer) outcome {
	var rd io.Reader
	if body != nil {
		// bytes.Reader lets net/http rewind the body should its transport
		// resend the request on a fresh connection.
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return outcome{err: fmt.Errorf("build request: %w", err)}
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}

	resp, err := c.http.Do(req)
	if err != nil {
		// Refused, reset, EOF, a timeout: the request may or may not have
		// reached the server, which is exactly what the key makes safe to
		// retry. Errors that no retry can fix (a bad URL) are caught by New.
		return outcome{err: fmt.Errorf("send: %w", err), retry: true}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		// The connection broke mid-body: the answer is lost, not final.
		return outcome{status: resp.StatusCode, err: fmt.Errorf("read response: %w", err), retry: true}
	}
	replayed := resp.Header.Get("Idempotent-Replayed") == "true"

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if !into.decode(raw, replayed) {
			return outcome{status: resp.StatusCode,
				err: fmt.Errorf("%w: %d with a body that is not %s (the object may exist: do not retry it under a new key): %q",
					errProtocol, resp.StatusCode, into.kind(), truncate(raw, 200))}
		}
		return outcome{status: resp.StatusCode}
	}

	e := &Error{
		Status:     resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		Replayed:   replayed,
		RawBody:    raw,
	}
	if isJSON(resp.Header.Get("Content-Type")) {
		// A body that is not a problem document leaves the fields empty;
		// the status still decides.
		_ = json.Unmarshal(raw, &e.Problem)
	}
	if e.Problem.Status == 0 {
		e.Problem.Status = resp.StatusCode
	}
	if e.Problem.Title == "" {
		e.Problem.Title = http.StatusText(resp.StatusCode)
	}
	return outcome{
		status:     resp.StatusCode,
		err:        e,
		retry:      retryable(resp.StatusCode, e.Problem.Code),
		unsettled:  e.Problem.Code == CodePaymentUnresolved,
		retryAfter: e.RetryAfter,
	}
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/problem+json" || mt == "application/json")
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
