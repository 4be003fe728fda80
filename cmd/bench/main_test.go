package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// `bench -h` printed its usage on stderr. Every spelling of help prints it
// on stdout and exits 0 before anything starts; a bad flag or argument
// exits 2 with the usage on stderr.
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
	} {
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(tt.args, &stdout, &stderr) }()
		select {
		case code := <-done:
			require.Equal(t, tt.code, code, "%q", tt.args)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "run did not return: it started a benchmark", "%q", tt.args)
		}
		if tt.code == 0 {
			require.Contains(t, stdout.String(), "Usage: bench", tt.args)
			require.Contains(t, stdout.String(), "-duration", tt.args)
			require.Empty(t, stderr.String(), tt.args)
		} else {
			require.Empty(t, stdout.String(), tt.args)
			require.Contains(t, stderr.String(), "Usage: bench", tt.args)
		}
	}
}
