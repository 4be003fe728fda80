package profile

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A backend's file counts from its main loop (the function that zeroes
// it is named, as a callee, once); a file without it is another process's.
func TestParseTotalTellsABackendsCount(t *testing.T) {
	t.Parallel()
	backend := `version: 1
creator: callgrind-3.19.0
pid: 17410
cmd:  /usr/lib/postgresql/15/bin/postgres -D /tmp/data
events: Ir
fn=(1) PostgresMain
12 3
cfn=(2) BeginReportingGUCOptions
calls=1 0
12 400
fn=(2)
5 400
summary: 136224152
totals: 136224152
`
	total, isBackend, err := parseTotal(strings.NewReader(backend))
	require.NoError(t, err)
	require.True(t, isBackend)
	require.InDelta(t, 136224152, total, 0)

	other := strings.NewReplacer("BeginReportingGUCOptions", "CheckpointerMain").Replace(backend)
	_, isBackend, err = parseTotal(strings.NewReader(other))
	require.NoError(t, err)
	require.False(t, isBackend)

	_, _, err = parseTotal(strings.NewReader("events: Ir\n"))
	require.Error(t, err)
}

// Functions are summed by name; unnamed ones, cycles and the frames
// below the server's main loop are left out.
func TestParseFunctionsSumsNamedFunctions(t *testing.T) {
	t.Parallel()
	out := `--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
99,455,735 (100.0%)  PROGRAM TOTALS
49,455,735 (100.0%)  ???:PostgresMain [/usr/lib/postgresql/15/bin/postgres]
11,703,423 (23.66%)  ./elf/./elf/dl-lookup.c:do_lookup_x [/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2]
 2,234,657 ( 4.52%)  ???:0x000000000030aa20 [/usr/lib/postgresql/15/bin/postgres]
 1,234,657 ( 2.52%)  ???:nodeRead'2 [/usr/lib/postgresql/15/bin/postgres]
 1,000,000 ( 2.02%)  * ???:ExecConstraints [/usr/lib/postgresql/15/bin/postgres]
    50,000 ( 0.10%)  ???:main [/usr/lib/postgresql/15/bin/postgres]
`
	fns := map[string]float64{"ExecConstraints": 1}
	parseFunctions(strings.NewReader(out), fns)
	require.Equal(t, map[string]float64{
		"PostgresMain":    49455735,
		"do_lookup_x":     11703423,
		"ExecConstraints": 1000001,
	}, fns)
}
