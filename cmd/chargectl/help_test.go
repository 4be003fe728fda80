package main

import (
	"bytes"
	"context"
	"io"
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

// A command's -h prints that command's usage, not every command's:
// `chargectl listen -h` says what listen does and takes, and names no
// other command.
func TestChargectlCommandHelpIsTheCommands(t *testing.T) {
	t.Parallel()
	env := func(string) string { return "" }
	for _, cmd := range []string{"charge", "get", "capture", "void", "refund", "get-refund", "list-charges", "list-refunds", "resume", "listen"} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, run(context.Background(), []string{cmd, "-h"}, env, &stdout, &stderr), "%s: %s", cmd, stderr.String())
		out := stdout.String()
		require.Contains(t, out, "  chargectl "+cmd+" ", cmd)
		require.Contains(t, out, "--api-key KEY", "%s: the flags every command takes", cmd)
		for _, other := range []string{"charge", "listen", "resume", "get-refund"} {
			if other != cmd {
				require.NotContains(t, out, "chargectl "+other+" ", "%s -h names %s", cmd, other)
			}
		}
	}
	var stdout bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"listen", "--help"}, env, &stdout, io.Discard))
	require.Contains(t, stdout.String(), "registers itself as a webhook endpoint")
	require.Contains(t, stdout.String(), "--addr HOST:PORT")
}
