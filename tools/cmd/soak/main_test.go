package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// -h prints the usage on stdout and exits 0 before anything is built or
// started.
func TestSoakHelpStartsNothing(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-duration", "10m", "-help"}} {
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(args, &stdout, &stderr) }()
		select {
		case code := <-done:
			require.Equal(t, 0, code, "%q", args)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "run did not return: it started a soak", "%q", args)
		}
		require.Contains(t, stdout.String(), "Usage: soak", "%q", args)
		require.Contains(t, stdout.String(), "-sample-every", "%q", args)
	}
}

// A run shorter than the hour writes under a name that says how long it
// was, so that it is never taken for the hour's soak.json.
func TestShortRunsAreNamedAfterTheirDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		10 * time.Minute: "10m", 90 * time.Second: "1m30s", 36 * time.Second: "36s", 90 * time.Minute: "1h30m", 2 * time.Hour: "2h",
	} {
		require.Equal(t, want, shortDuration(d), "%s", d)
	}
}

// A bad flag is a usage error (2), with the usage on stderr.
func TestSoakBadFlagIsUsageError(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run([]string{"-duration", "soon"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "Usage: soak")
	require.Empty(t, stdout.String())
}
