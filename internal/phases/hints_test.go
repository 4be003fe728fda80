package phases

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The hints cover a bench's worth of recent keys. Of 100,000 keys added,
// nearly all are still seen, and keys never added are not. A table of 2^14
// slots kept one in six, and make bench's replays went through the claim.
func TestKeyHintsRememberRecentKeys(t *testing.T) {
	t.Parallel()
	h := newKeyHints()
	const n = 100_000
	for i := range n {
		h.add(1, fmt.Sprintf("key-%d", i), time.Time{})
	}
	seen, wrong := 0, 0
	for i := range n {
		if _, ok := h.seen(1, fmt.Sprintf("key-%d", i)); ok {
			seen++
		}
		_, other := h.seen(1, fmt.Sprintf("other-%d", i))
		_, tenant := h.seen(2, fmt.Sprintf("key-%d", i))
		if other || tenant {
			wrong++
		}
	}
	require.Greater(t, seen, n*90/100, "recent keys remembered")
	require.Less(t, wrong, 10, "keys never added (or of another tenant) not seen")
}

// A hint stores the day of the key's row and gives it back (its UTC
// midnight); a hint added without a day keeps the day known, which
// noDay forgets.
func TestKeyHintsRememberTheDay(t *testing.T) {
	t.Parallel()
	h := newKeyHints()
	created := time.Date(2026, 12, 3, 23, 59, 59, 0, time.FixedZone("UTC+2", 2*3600)) // 21:59:59 UTC
	h.add(7, "k", time.Time{})
	d, ok := h.seen(7, "k")
	require.True(t, ok)
	require.True(t, d.IsZero(), "seen, day unknown")

	h.add(7, "k", created)
	d, ok = h.seen(7, "k")
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), d)

	h.add(7, "k", time.Time{})
	d, _ = h.seen(7, "k")
	require.Equal(t, time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), d, "kept by a request that does not know it")

	h.noDay(7, "k")
	d, ok = h.seen(7, "k")
	require.True(t, ok)
	require.True(t, d.IsZero())

	_, ok = h.seen(8, "k")
	require.False(t, ok)
}
