package profile

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTopReadsEachFunctionsShares(t *testing.T) {
	t.Parallel()
	out := `File: api
Type: cpu
Duration: 5.11s, Total samples = 3.20s (62.60%)
Showing nodes accounting for 1.10s, 34.38% of 3.20s total
      flat  flat%   sum%        cum   cum%
         0     0%     0%      2.50s 78.12%  net/http.(*conn).serve
     0.01s  0.31%  0.31%      1.20s 37.50%  github.com/phasepay/phasepay/internal/phases.(*Engine).Run
     0.30s  9.38%  9.69%      0.30s  9.38%  runtime/internal/syscall.Syscall6
`
	require.Equal(t, []Func{
		{Name: "net/http.(*conn).serve", Cum: 78.12, Flat: 0},
		{Name: "github.com/phasepay/phasepay/internal/phases.(*Engine).Run", Cum: 37.5, Flat: 0.31},
		{Name: "runtime/internal/syscall.Syscall6", Cum: 9.38, Flat: 9.38},
	}, parseTop(strings.NewReader(out)))
}
