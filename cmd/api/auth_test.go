package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The authentication scheme is case-insensitive (RFC 9110, 11.1); the key
// itself is not.
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		status, _, _ := b.do(t, http.MethodGet, "/v1/charges/ch_unknown", map[string]string{"Authorization": scheme + " " + b.key}, nil)
		require.Equal(t, http.StatusNotFound, status, scheme)
	}
	status, _, _ := b.do(t, http.MethodGet, "/v1/charges/ch_unknown", map[string]string{"Authorization": "Basic " + b.key}, nil)
	require.Equal(t, http.StatusUnauthorized, status)
}
