package client

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFullJitterWithinCap is a property test over many seeded draws: every
// draw lies in [0, min(max, initial·2^n)], and the draws spread over the
// whole window (full jitter, not "equal jitter" that never goes below half).
func TestFullJitterWithinCap(t *testing.T) {
	t.Parallel()
	const draws = 1000
	r := rand.New(rand.NewPCG(42, 4242))
	for _, bounds := range []struct{ initial, ceiling time.Duration }{
		{100 * time.Millisecond, 5 * time.Second},
		{time.Millisecond, time.Millisecond},
		{time.Nanosecond, time.Hour},
		{3 * time.Second, time.Duration(math.MaxInt64)},
	} {
		for n := 0; n < 80; n++ {
			// The cap, computed independently of fullJitter's doubling loop:
			// in float64, where initial·2^n cannot overflow.
			window := bounds.ceiling
			if float64(bounds.initial)*math.Pow(2, float64(n)) < float64(bounds.ceiling) {
				window = bounds.initial << n
			}
			lo, hi := window, time.Duration(0)
			for range draws {
				d := fullJitter(r, bounds.initial, bounds.ceiling, n)
				if d < 0 || d > window {
					require.FailNow(t, "draw out of [0, cap]", "initial %s max %s retry %d: %s not in [0, %s]",
						bounds.initial, bounds.ceiling, n, d, window)
				}
				lo, hi = min(lo, d), max(hi, d)
			}
			if window >= 100 {
				require.Less(t, lo, window/10, "full jitter reaches the bottom of the window")
				require.Greater(t, hi, window-window/10, "and its top")
			}
		}
	}
}

func TestFullJitterIsRepeatableWithASeed(t *testing.T) {
	t.Parallel()
	draw := func() []time.Duration {
		r := rand.New(rand.NewPCG(7, 7))
		var out []time.Duration
		for n := range 20 {
			out = append(out, fullJitter(r, 100*time.Millisecond, 5*time.Second, n))
		}
		return out
	}
	first := draw()
	require.Equal(t, first, draw())
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"1", time.Second},
		{" 2 ", 2 * time.Second},
		{"0", 0},
		{"-5", 0},
		{"soon", 0},
		{"Fri, 31 Jan 2025 12:00:10 GMT", 10 * time.Second},
		{"Fri, 31 Jan 2025 11:00:00 GMT", 0},
		{"99999999999999", time.Duration(1<<30) * time.Second},
	} {
		require.Equal(t, tt.want, parseRetryAfter(tt.in, now), "Retry-After %q", tt.in)
	}
}
