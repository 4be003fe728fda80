package charges

import (
	"errors"

	"github.com/phasepay/phasepay/internal/phases"
)

// Sentinel errors of the charges service. Idempotency outcomes are
// idempotency.ErrMismatch and idempotency.ErrInProgress.
var (
	// ErrNotFound: no such charge for this tenant.
	ErrNotFound = errors.New("charge not found")
	// ErrPSPUnavailable: the PSP did not answer after the client's retries,
	// or was busy. The key was released at its last recovery point and
	// resumes on retry.
	ErrPSPUnavailable = phases.ErrUnavailable
)

// UnavailableError is ErrPSPUnavailable with what the client is told: the
// charge that exists (if any) and when its next attempt is due.
type UnavailableError = phases.UnavailableError
