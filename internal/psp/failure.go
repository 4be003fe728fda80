package psp

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// Failure is the error of a PSP exchange that gave no result: a refusal, a
// busy PSP, or an unknown outcome. It describes one event twice, for two
// audiences, and is built where the answer is classified, so that nothing
// downstream ever has to scrub a message:
//
//   - Public holds stable words a tenant may read (last_error in GET
//     /v1/idempotency_keys/{key}, the request.needs_attention event, the
//     detail of a 402 payment_failed when the PSP gave no reason). They say
//     what happened, never where: no host, address, port, URL or resolver,
//     and no answer body. The words are listed in docs/api.md ("Why a
//     request did not finish").
//   - Err is the raw cause, for operators (logs, `bin/api requests show`):
//     the address dialled, the status and body the PSP answered. Even there
//     the configured URL appears without credentials or query (RedactURL).
//
// Err wraps the class's sentinel (ErrRejected, ErrBusy, ErrUnavailable), or
// context.Canceled when the caller left, so errors.Is sees through a
// Failure as through the plain errors it replaces.
type Failure struct {
	// Class is the outcome class of the exchange.
	Class Class
	// Public is what happened, in the stable words above.
	Public string
	// Err is the raw cause.
	Err error
}

// Error is the raw cause: a Failure logged or wrapped reads as it did
// before it carried public words.
func (f *Failure) Error() string { return f.Err.Error() }

func (f *Failure) Unwrap() error { return f.Err }

// PublicReason returns the words a tenant may read. It is how packages that
// know nothing of PSPs find them in an error chain (internal/idempotency
// writes them as a key's last_error).
func (f *Failure) PublicReason() string { return f.Public }

// publicOf returns the public words of the Failure in err's chain, or ""
// if it holds none.
func publicOf(err error) string {
	if f, ok := errors.AsType[*Failure](err); ok {
		return f.Public
	}
	return ""
}

// The public words of the failures that carry no status (see Failure).
const (
	// ReasonUnreachable: no connection could be made (refused, no route,
	// the name did not resolve, the TLS handshake failed).
	ReasonUnreachable = "PSP unreachable"
	// ReasonTimedOut: no whole answer within the attempt's timeout.
	ReasonTimedOut = "PSP timed out"
	// ReasonConnectionLost: the connection broke after the request went
	// out and before the whole answer came back (the answer lost).
	ReasonConnectionLost = "PSP connection lost"
	// ReasonMalformed: a 2xx that is not a result phasepay can record.
	ReasonMalformed = "PSP answer malformed"
	// ReasonInterrupted: phasepay stopped waiting (it is shutting down).
	ReasonInterrupted = "attempt interrupted"
)

// reasonAnswered is the public words of an answer whose status the
// contract does not name (5xx, 401, 403, 408, 1xx, 3xx): "PSP answered 503".
func reasonAnswered(status int) string { return "PSP answered " + strconv.Itoa(status) }

// reasonBusy is the public words of a busy answer: "PSP busy (429)".
func reasonBusy(status int) string { return "PSP busy (" + strconv.Itoa(status) + ")" }

// reasonRefused is the public words of a refusal that gave no reason of its
// own: "PSP refused the request (400)".
func reasonRefused(status int) string {
	return "PSP refused the request (" + strconv.Itoa(status) + ")"
}

// NewFailure is the Failure of an exchange that gave no result, for a PSP
// connector outside this package: its public words are classified from
// class, the status the PSP answered (0 if none) and err, what went wrong
// sending or reading (nil if nothing did); cause is the raw cause, which
// must wrap the class's sentinel.
func NewFailure(ctx context.Context, class Class, status int, err, cause error) *Failure {
	return &Failure{Class: class, Public: publicReason(ctx, class, status, err), Err: cause}
}

// PSPReason is pspReason for a PSP connector outside this package: the
// code and message of an {"error": {"code", "message"}} body, fit for a
// tenant to read, or "".
func PSPReason(raw []byte) string { return pspReason(raw) }

// newFailure classifies a failed exchange's public words (publicReason)
// and pairs them with its raw cause.
func newFailure(ctx context.Context, class Class, status int, cause error) *Failure {
	return &Failure{Class: class, Public: publicReason(ctx, class, status, cause), Err: cause}
}

// publicReason is the one place a failed exchange gets its public words:
// from its class, the status the PSP answered (0 if none) and what went
// wrong sending the request or reading the answer (nil if nothing did).
// Only the kind of the error decides, never its text, which may name the
// PSP's address or quote its body.
func publicReason(ctx context.Context, class Class, status int, err error) string {
	var (
		netErr net.Error
		dnsErr *net.DNSError
		opErr  *net.OpError
	)
	switch {
	case errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled):
		return ReasonInterrupted
	case class == ClassBusy:
		return reasonBusy(status)
	case class == ClassFinalFailure:
		return reasonRefused(status)
	case errors.Is(err, errMalformed) && status >= 200 && status < 300:
		return ReasonMalformed
	case status != 0 && (err == nil || errors.Is(err, errMalformed)):
		return reasonAnswered(status)
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimedOut
	case errors.As(err, &dnsErr), errors.As(err, &opErr) && opErr.Op == "dial":
		return ReasonUnreachable
	default:
		return ReasonConnectionLost
	}
}

// maxReasonRunes bounds the PSP's own reason where a tenant reads it.
const maxReasonRunes = 200

// pspReason is the PSP's own explanation of a refusal or busy answer: the
// code and message of {"error": {"code", "message"}}, as the mock (and most
// PSPs) answer, on one line of printable characters, at most
// maxReasonRunes long. A body of any other shape has no reason field, and
// is never quoted instead (it may be a proxy's page naming internal hosts):
// the result is then "", and the caller falls back on the public words.
func pspReason(raw []byte) string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.Error.Message == "" {
		return ""
	}
	s := e.Error.Message
	if e.Error.Code != "" {
		s = e.Error.Code + ": " + s
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, s)
	if r := []rune(s); len(r) > maxReasonRunes {
		s = string(r[:maxReasonRunes]) + "..."
	}
	return s
}

// RedactURL returns u without what must never reach a log line or an
// error message: its user information (credentials) and its query and
// fragment (which may carry tokens). Scheme, host, port and path are kept,
// for an operator to recognise the PSP. A value that does not parse as a
// URL is replaced whole, since where its credentials start cannot be
// known.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparseable URL)"
	}
	p.User, p.RawQuery, p.ForceQuery, p.Fragment, p.RawFragment = nil, "", false, "", ""
	return p.String()
}
