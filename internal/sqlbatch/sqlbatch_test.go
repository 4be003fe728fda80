package sqlbatch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRegisterKeepsOneFormPerStatement: a form is found by its statement,
// a statement without one is not batched, and a second form for the same
// statement is a programming error caught at start-up.
func TestRegisterKeepsOneFormPerStatement(t *testing.T) {
	single := Register(`SELECT $1::int`, `SELECT x FROM unnest($1::int[]) AS x`)
	require.Equal(t, `SELECT $1::int`, single)
	many, ok := Of(single)
	require.True(t, ok)
	require.Equal(t, `SELECT x FROM unnest($1::int[]) AS x`, many)
	_, ok = Of(`SELECT 2`)
	require.False(t, ok)
	require.Panics(t, func() { Register(single, `SELECT 3`) })
}
