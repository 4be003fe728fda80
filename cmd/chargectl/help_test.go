package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Like every binary, chargectl answers -h/--help, before or after its
// command, with the usage on stdout and exit 0, and calls no API.
func TestChargectlHelpStartsNothing(t *testing.T) {
	t.Parallel()
	env := func(k string) string {
		return map[string]string{"PHASEPAY_API_URL": "http://127.0.0.1:1", "PHASEPAY_JOURNAL": t.TempDir()}[k]
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"charge", "-h"}, {"get", "--help"}, {"resume", "-help"},
		{"capture", "-h"}, {"void", "-h"}, {"refund", "ch_1", "-h"}, {"get-refund", "--help"}, {"list-charges", "-h"}, {"list-refunds", "-h"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, env, &stdout, &stderr)
		require.Equal(t, 0, code, "%q: %s", args, stderr.String())
		require.Contains(t, stdout.String(), "Usage:", "%v", args)
		require.Empty(t, stderr.String(), "%v", args)
	}
}
