package charges

import "errors"

// Sentinel errors of the charges service. Idempotency outcomes are
// idempotency.ErrMismatch and idempotency.ErrInProgress.
var (
	// ErrNotFound: no such charge for this tenant.
	ErrNotFound = errors.New("charge not found")
	// ErrPSPUnavailable: the PSP did not answer after the client's retries.
	// The key was released at its last recovery point and resumes on retry.
	ErrPSPUnavailable = errors.New("payment service provider unavailable")
)
