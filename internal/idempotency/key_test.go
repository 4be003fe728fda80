package idempotency_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 255)
	tests := []struct {
		header  string
		want    string
		wantErr error
	}{
		{header: "abc", want: "abc"},
		{header: `"abc"`, want: "abc"},
		{header: `"a\"b\\c"`, want: `a"b\c`},
		{header: `ab"c`, want: `ab"c`},
		{header: long, want: long},
		{header: `"` + long + `"`, want: long},
		{header: "", wantErr: idempotency.ErrKeyMissing},
		{header: `""`, wantErr: idempotency.ErrKeyInvalid},
		{header: long + "k", wantErr: idempotency.ErrKeyInvalid},
		{header: "a b", wantErr: idempotency.ErrKeyInvalid},
		{header: `"a b"`, wantErr: idempotency.ErrKeyInvalid},
		{header: "tab\there", wantErr: idempotency.ErrKeyInvalid},
		{header: "caf\u00e9", wantErr: idempotency.ErrKeyInvalid},
		{header: `"a\nb"`, wantErr: idempotency.ErrKeyInvalid},
		{header: `"a"b"`, wantErr: idempotency.ErrKeyInvalid},
		{header: `"ab\"`, wantErr: idempotency.ErrKeyInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			t.Parallel()
			got, err := idempotency.ParseKey(tt.header)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "", `""`, "a b", "\x00", strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		key, err := idempotency.ParseKey(header)
		if err != nil {
			return
		}
		// Whatever is accepted is a storable key…
		if len(key) < 1 || len(key) > idempotency.MaxKeyLength {
			t.Fatalf("accepted key of length %d", len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("accepted non-visible byte %#x", key[i])
			}
		}
		// …and its quoted form means the same key.
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		again, err := idempotency.ParseKey(quoted)
		if err != nil || again != key {
			t.Fatalf("quoted form %q of %q parsed as %q, %v", quoted, key, again, err)
		}
	})
}
