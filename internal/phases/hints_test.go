package phases

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// The hints cover a bench's worth of recent keys: of 100,000 keys added,
// nearly all are still seen (a table of 2^14 slots kept one in six, and the
// replays of make bench went through the claim), and keys never added are
// not.
func TestKeyHintsRememberRecentKeys(t *testing.T) {
	t.Parallel()
	h := newKeyHints()
	const n = 100_000
	for i := range n {
		h.add(1, fmt.Sprintf("key-%d", i))
	}
	seen, wrong := 0, 0
	for i := range n {
		if h.seen(1, fmt.Sprintf("key-%d", i)) {
			seen++
		}
		if h.seen(1, fmt.Sprintf("other-%d", i)) || h.seen(2, fmt.Sprintf("key-%d", i)) {
			wrong++
		}
	}
	require.Greater(t, seen, n*90/100, "recent keys remembered")
	require.Less(t, wrong, 10, "keys never added (or of another tenant) not seen")
}
