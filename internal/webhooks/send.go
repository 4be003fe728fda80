package webhooks

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"
)

// send POSTs the event and returns the answer's status (0 if there was
// none) and, if the exchange itself failed, why: the raw cause, for the
// logs only, without the URL.
func (d *Deliverer) send(ctx context.Context, dl delivery) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dl.URL, bytes.NewReader(dl.Body))
	if err != nil {
		return 0, withoutURL(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "phasepay-webhooks/1")
	req.Header.Set(SignatureHeader, Sign(dl.Secret, time.Now(), dl.Body))
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, withoutURL(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}

// withoutURL drops the *url.Error around err: its text carries the whole
// URL, whose query may hold a receiver's token.
func withoutURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// attemptError says what went wrong with an attempt in the stable words a
// tenant reads (GET /v1/events/{id}/deliveries): what happened, never the
// address dialled, the resolver asked or the URL. A name that does not
// resolve and one that resolves to a refused address read the same (see
// ErrNotPublic).
func attemptError(status int, cause error, timeout time.Duration) string {
	if cause == nil {
		return "endpoint answered " + strconv.Itoa(status)
	}
	var (
		dnsErr      *net.DNSError
		netErr      net.Error
		certErr     *tls.CertificateVerificationError
		unknownCA   x509.UnknownAuthorityError
		badHost     x509.HostnameError
		badCert     x509.CertificateInvalidError
		recordErr   tls.RecordHeaderError
		alert       tls.AlertError
		echRejected *tls.ECHRejectionError
	)
	switch {
	case errors.Is(cause, ErrNotPublic), errors.As(cause, &dnsErr):
		return ErrNotPublic.Error()
	case errors.Is(cause, context.DeadlineExceeded), errors.As(cause, &netErr) && netErr.Timeout():
		return "endpoint timed out after " + strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64) + " s"
	case errors.Is(cause, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(cause, syscall.EHOSTUNREACH), errors.Is(cause, syscall.ENETUNREACH):
		return "endpoint unreachable"
	case errors.As(cause, &certErr), errors.As(cause, &unknownCA), errors.As(cause, &badHost), errors.As(cause, &badCert):
		return "endpoint's TLS certificate not accepted"
	case errors.As(cause, &recordErr), errors.As(cause, &alert), errors.As(cause, &echRejected):
		return "TLS handshake failed"
	case errors.Is(cause, syscall.ECONNRESET), errors.Is(cause, syscall.EPIPE), errors.Is(cause, io.EOF),
		errors.Is(cause, io.ErrUnexpectedEOF):
		return "connection closed without an answer"
	}
	return "connection failed"
}

// NewClient returns the HTTP client deliveries are sent with: no proxy
// (a proxy would connect to the address for us, past the guard), no
// redirects (a 3xx is not a 2xx: the attempt failed, and a redirect could
// point anywhere), every connection checked by the guard's DialControl
// unless it allows private addresses, the whole attempt bounded by
// timeout.
func NewClient(timeout time.Duration, guard *Guard) *http.Client {
	dialer := &net.Dialer{Timeout: timeout}
	if !guard.AllowsPrivate() {
		dialer.Control = guard.DialControl
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   PerEndpointDefault,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
