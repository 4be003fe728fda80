package phases

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// The registry finds an operation by the stored request path, whose
// parameters are whole segments: a capture's path names its charge.
func TestPathPatterns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"/v1/charges", "/v1/charges", true},
		{"/v1/charges", "/v1/charges/ch_1/capture", false},
		{"/v1/charges/{id}/capture", "/v1/charges/ch_1/capture", true},
		{"/v1/charges/{id}/capture", "/v1/charges//capture", false},
		{"/v1/charges/{id}/capture", "/v1/charges/ch_1/void", false},
		{"/v1/refunds", "/v1/refunds", true},
	} {
		require.Equal(t, tc.want, match(tc.pattern, tc.path), "%s ~ %s", tc.pattern, tc.path)
	}
	require.Equal(t, "ch_1", Segment("/v1/charges/{id}/capture", "/v1/charges/ch_1/capture", "id"))
	require.Empty(t, Segment("/v1/charges/{id}/capture", "/v1/refunds", "id"))
}

// The arrows that share a transaction: up to the next foreign call, none
// with a call in the claim's, and one each with OneCommitPerPhase.
func TestGroups(t *testing.T) {
	t.Parallel()
	called := func(context.Context, *Run[int]) (psp.Outcome, error) { return psp.Outcome{}, nil }
	op := &Operation[int]{Arrows: []Arrow[int]{{To: "a"}, {To: "b"}, {To: "c", Call: called}, {To: idempotency.PointDone}}}
	require.Len(t, op.group(0, false, true), 2, "a and b fold into the claim")
	require.Len(t, op.group(0, false, false), 2, "a and b, before the call")
	require.Empty(t, op.group(0, true, true))
	require.Len(t, op.group(2, false, false), 2, "c and done")
	require.Len(t, op.group(2, true, false), 1)
}
