package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// `mockpsp -h` used to start a mock PSP. Every spelling of help prints the
// usage on stdout and exits 0 without starting anything; any other
// argument exits 2.
func TestMockPSPHelpStartsNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"-help"}, 0},
		{[]string{"--bogus"}, 2},
		{[]string{"serve"}, 2},
	} {
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(tt.args, &stdout, &stderr) }()
		select {
		case code := <-done:
			require.Equal(t, tt.code, code, "%q", "%v", tt.args)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "run did not return: it started a server", "%q", "%v", tt.args)
		}
		if tt.code == 0 {
			require.Contains(t, stdout.String(), "Usage: mockpsp", "%v", tt.args)
			require.Contains(t, stdout.String(), "MOCKPSP_ADDR", "%v", tt.args)
			require.Empty(t, stderr.String(), "%v", tt.args)
		} else {
			require.Empty(t, stdout.String(), "%v", tt.args)
			require.Contains(t, stderr.String(), "mockpsp -h", "%v", tt.args)
		}
	}
}
