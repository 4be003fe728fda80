package phases

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// A release's reason is in the stable words a tenant may read: the class
// and status of the PSP's answer, or that none came, and never what the
// error's text carries (an address, the PSP's body).
func TestReleaseReasonsAreStableWords(t *testing.T) {
	t.Parallel()
	refused := &url.Error{Op: "Post", URL: "http://10.1.2.3:8090/v1/authorizations",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}
	tests := []struct {
		out  psp.Outcome
		err  error
		want string
	}{
		{psp.Outcome{Class: psp.ClassUnknown, StatusCode: 503}, fmt.Errorf("%w: status 503: <html>upstream 10.1.2.3</html>", psp.ErrUnavailable), "PSP answered 503"},
		{psp.Outcome{Class: psp.ClassBusy, StatusCode: 429}, psp.ErrBusy, "PSP answered 429"},
		{psp.Outcome{Class: psp.ClassUnknown}, fmt.Errorf("%w: %w", psp.ErrUnavailable, refused), "PSP unreachable"},
		{psp.Outcome{Class: psp.ClassUnknown}, fmt.Errorf("%w: %w", psp.ErrUnavailable, context.DeadlineExceeded), "PSP timed out"},
		{psp.Outcome{Class: psp.ClassUnknown, StatusCode: 200}, fmt.Errorf("%w: malformed", psp.ErrUnavailable), "PSP answer not understood"},
		{psp.Outcome{Class: psp.ClassUnknown}, context.Canceled, "attempt canceled"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, pspReason(tt.out, tt.err), "%v", tt.err)
	}
	// A cause that has its reason keeps it.
	cause := withReason("PSP answered 503", psp.ErrUnavailable)
	require.Same(t, cause, withReason(reasonNoOperation, cause))
	require.Equal(t, psp.ErrUnavailable.Error(), cause.Error(), "the raw cause's text is kept for last_error")
	require.ErrorIs(t, cause, psp.ErrUnavailable)
	var reasoned *idempotency.ReasonedError
	require.ErrorAs(t, withReason(reasonNoOperation, errors.New("no operation")), &reasoned)
	require.Equal(t, reasonNoOperation, reasoned.Reason)
}
