package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// `chaos -h` printed its usage on stderr and exited 2. Every spelling of
// help prints it on stdout and exits 0 before anything is built or
// started.
func TestChaosHelpStartsNothing(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-seed", "7", "-help"}} {
		var stdout bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(args, &stdout) }()
		select {
		case code := <-done:
			require.Equal(t, 0, code, "%q", "%v", args)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "run did not return: it started a chaos run", "%q", "%v", args)
		}
		require.Contains(t, stdout.String(), "Usage: chaos", "%v", args)
		require.Contains(t, stdout.String(), "-db-restarts", "%v", args)
	}
}
