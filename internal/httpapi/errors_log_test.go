package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/problem"
)

// TestOnlyInternalErrorsLogAsErrors: a 500 is logged at ERROR; a 503 (the
// PSP or the database away, a retry before its time) at WARN, so that an
// outage's answers do not bury a bug; a 4xx not at all.
func TestOnlyInternalErrorsLogAsErrors(t *testing.T) {
	for _, tc := range []struct {
		err   error
		level string // "" for no line
	}{
		{errors.New("boom"), "ERROR"},
		{charges.ErrPSPUnavailable, "WARN"},
		{idempotency.ErrNotDue, "WARN"},
		{idempotency.ErrMismatch, ""},
	} {
		var buf bytes.Buffer
		s := &server{log: slog.New(slog.NewJSONHandler(&buf, nil))}
		s.writeError(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/charges", nil), tc.err)
		if tc.level == "" {
			require.Empty(t, buf.String(), "%v", tc.err)
			continue
		}
		var line struct {
			Level  string
			Msg    string
			Status int
		}
		require.NoError(t, json.Unmarshal(buf.Bytes(), &line), buf.String())
		require.Equal(t, tc.level, line.Level, "%v", tc.err)
		require.Equal(t, "request failed", line.Msg)
		require.NotZero(t, line.Status)
	}
}

// TestUnreachablePSPIsNotReadAsDatabaseUnavailable: a request given up
// (needs_attention) after the PSP was unreachable wraps the PSP's dial
// error, which dbstate.Unavailable cannot tell from the database's: it was
// answered 503 database_unavailable, telling the client to retry what only
// an operator can settle.
func TestUnreachablePSPIsNotReadAsDatabaseUnavailable(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	given := fmt.Errorf("%w: %w", idempotency.ErrUnresolved, fmt.Errorf("authorize: %w", dial))
	p := problemFor(given)
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Equal(t, problem.PaymentUnresolved, p.Code)
	require.Equal(t, problem.DatabaseUnavailable, problemFor(fmt.Errorf("claim: %w", dial)).Code)
}
