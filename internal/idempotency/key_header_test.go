package idempotency_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Two Idempotency-Key header fields in one request: the first was used
// silently (http.Header.Get), though an intermediary may have kept the
// other. They are refused; one field is parsed by ParseKey.
func TestTwoIdempotencyKeyHeadersAreRejected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		values  []string
		want    string
		wantErr error
	}{
		{name: "none", wantErr: idempotency.ErrKeyMissing},
		{name: "one", values: []string{"order-1"}, want: "order-1"},
		{name: "one quoted", values: []string{`"order-1"`}, want: "order-1"},
		{name: "one with a comma", values: []string{"a,b"}, want: "a,b"},
		{name: "one empty", values: []string{""}, wantErr: idempotency.ErrKeyMissing},
		{name: "one malformed", values: []string{"a b"}, wantErr: idempotency.ErrKeyInvalid},
		{name: "two different", values: []string{"order-1", "order-2"}, wantErr: idempotency.ErrKeyInvalid},
		{name: "two equal", values: []string{"order-1", "order-1"}, wantErr: idempotency.ErrKeyInvalid},
		{name: "two, the first empty", values: []string{"", "order-1"}, wantErr: idempotency.ErrKeyInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("idempotency-key", v) // canonicalized, as net/http does
			}
			got, err := idempotency.KeyFromHeader(h)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
