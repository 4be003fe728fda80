package idempotency

import (
	"context"
	"errors"

	"github.com/phasepay/phasepay/internal/dbstate"
)

// Why an attempt did not finish is written twice, for two audiences, by
// the one statement that releases the key (releaseSQL):
//
//   - last_error, which the tenant reads (GET /v1/idempotency_keys/{key},
//     the request.needs_attention event): stable words that name no host,
//     address, port, URL or resolver and quote no foreign answer, e.g.
//     "PSP unreachable", "PSP answered 503";
//   - last_error_detail, which only operators read (`bin/api requests
//     show`, `requests list --json`): the raw cause, e.g. the address
//     dialled or the PSP's answer body.
//
// The words come from the cause itself (PublicError), given where the
// failure was classified (internal/psp's Failure), so that no message is
// ever scrubbed after the fact; a cause without words gets the generic
// ones below, never its own text.

// PublicError is an error that says what went wrong in words a tenant may
// read: PublicReason names no host, address, port, URL or resolver and
// quotes no foreign answer. Release finds it anywhere in its cause's chain.
type PublicError interface {
	error
	PublicReason() string
}

// The last_error of a release whose cause carries no words of its own.
const (
	// ReasonReleased: released without a cause.
	ReasonReleased = "released"
	// ReasonDatabaseUnavailable: the database failed under the attempt.
	ReasonDatabaseUnavailable = "database unavailable"
	// ReasonInterrupted: the attempt was stopped (the process shutting down).
	ReasonInterrupted = "attempt interrupted"
	// ReasonInternal: anything else, which is ours to fix; what it was is in
	// last_error_detail and the logs.
	ReasonInternal = "internal error"
)

// maxReasonRunes and maxDetailRunes bound last_error and last_error_detail.
const (
	maxReasonRunes = 1000
	maxDetailRunes = 4000
)

// releaseReasons returns what Release writes for cause: its public words
// (last_error) and its raw text (last_error_detail, "" for none).
func releaseReasons(cause error) (public, detail string) {
	if cause == nil {
		return ReasonReleased, ""
	}
	detail = truncateRunes(cause.Error(), maxDetailRunes)
	if p, ok := errors.AsType[PublicError](cause); ok && p.PublicReason() != "" {
		return truncateRunes(p.PublicReason(), maxReasonRunes), detail
	}
	switch {
	case errors.Is(cause, context.Canceled):
		return ReasonInterrupted, detail
	case dbstate.Unavailable(cause):
		return ReasonDatabaseUnavailable, detail
	default:
		return ReasonInternal, detail
	}
}
