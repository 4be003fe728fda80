package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// `bench -h` printed its usage on stderr. Every spelling of help prints it
// on stdout and exits 0 before anything starts; a bad flag or argument
// exits 2 with the usage on stderr. The same holds for `bench bare`.
func TestBenchHelpStartsNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"-quick", "-h"}, 0},
		{[]string{"--bogus"}, 2},
		{[]string{"now"}, 2},
		{[]string{"bare", "-h"}, 0},
		{[]string{"bare", "--help"}, 0},
		{[]string{"bare", "-quick"}, 2},
		{[]string{"bare", "now"}, 2},
	} {
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(tt.args, noEnv, &stdout, &stderr) }()
		select {
		case code := <-done:
			require.Equal(t, tt.code, code, "%q", "%v", tt.args)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "run did not return: it started a benchmark", "%q", "%v", tt.args)
		}
		if tt.code == 0 {
			require.Contains(t, stdout.String(), "Usage: bench", "%v", tt.args)
			require.Contains(t, stdout.String(), "bench bare", "%v", tt.args)
			if tt.args[0] != "bare" {
				require.Contains(t, stdout.String(), "-duration", "%v", tt.args)
			}
			require.Empty(t, stderr.String(), "%v", tt.args)
		} else {
			require.Empty(t, stdout.String(), "%v", tt.args)
			require.Contains(t, stderr.String(), "Usage: bench", "%v", tt.args)
		}
	}
}

func noEnv(string) string { return "" }

// `bench bare` is started by the benchmark with its environment set; run
// without it, it says which variables are missing and exits 2 at once,
// rather than listening nowhere useful.
func TestBenchBareWithoutEnvironmentRefusesToStart(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	env := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"}
	code := run([]string{"bare"}, func(k string) string { return env[k] }, &stdout, &stderr)
	require.Equal(t, 2, code)
	require.Empty(t, stdout.String())
	require.Equal(t, "bench bare: BARE_ADDR, PSP_URL not set (make bench sets them when it starts the bare baselines)\n", stderr.String())
}
