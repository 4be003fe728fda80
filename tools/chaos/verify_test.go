package chaos

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The summary's PSP counts come from the mock's request log: sends per
// PSP key (a resend is every send of a key after its first), lookups and
// the failed ones; other paths (captures, admin) are not authorizations.
func TestSendsPerKeyCountedFromRequestLog(t *testing.T) {
	t.Parallel()
	post := func(key string, status int) pspRequest {
		return pspRequest{Method: http.MethodPost, Path: "/v1/authorizations", IdempotencyKey: key, Status: status}
	}
	lookup := func(status int) pspRequest {
		return pspRequest{Method: http.MethodGet, Path: "/v1/authorizations", Status: status}
	}
	log := []pspRequest{
		post("a", 503), lookup(503), lookup(200), post("a", 200),
		post("b", 0), lookup(200),
		post("c", 200),
		{Method: http.MethodPost, Path: "/v1/captures", IdempotencyKey: "a:capture", Status: 200},
	}
	var sum Summary
	countRequests(&sum, log)
	require.Equal(t, 8, sum.PSPRequests)
	require.Equal(t, 4, sum.Sends)
	require.Equal(t, 1, sum.Resends)
	require.Equal(t, 3, sum.Lookups)
	require.Equal(t, 1, sum.LookupsFailed)
	require.Equal(t, 2, sum.AttemptsMax)
	require.Equal(t, 2, sum.AttemptsP99)
}

func TestMaxAndP99(t *testing.T) {
	t.Parallel()
	counts := make([]int, 200)
	for i := range counts {
		counts[i] = 1
	}
	counts[7], counts[100], counts[150] = 9, 5, 4 // the top 1% is 2 keys
	m, p99 := maxAndP99(counts)
	require.Equal(t, 9, m)
	require.Equal(t, 4, p99)
	m, p99 = maxAndP99(nil)
	require.Zero(t, m+p99)
}
