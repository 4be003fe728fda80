package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// runResult is one in-process run of the reaper's command line.
type runResult struct {
	code           int
	stdout, stderr string
}

// runWithin runs the command line and fails the test if it has not
// returned within d: what is tested here must answer at once, and a reaper
// that started its loop instead would never return.
func runWithin(t *testing.T, d time.Duration, args []string, vars map[string]string) runResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, env(vars), &stdout, &stderr) }()
	select {
	case code := <-done:
		return runResult{code, stdout.String(), stderr.String()}
	case <-time.After(d):
		require.FailNow(t, "run did not return: it started a reaper", "args %q", "%v", args)
		return runResult{}
	}
}

// freeAddr returns an address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Unset or empty, PSP_URL used to mean an in-process mock PSP: a reaper
// that lost its configuration in production would drive requests against a
// mock and record authorizations no PSP ever saw. It must refuse to start,
// at once, with one line naming PSP_URL.
func TestReaperWithoutPSPURLRefusesToStart(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t) // a database it could run on: only PSP_URL is missing
	for name, vars := range map[string]map[string]string{
		"unset": {"DATABASE_URL": dbURL},
		"empty": {"DATABASE_URL": dbURL, "PSP_URL": ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runWithin(t, 5*time.Second, nil, vars)
			require.NotZero(t, r.code)
			require.Empty(t, r.stdout)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
			require.Contains(t, r.stderr, "PSP_URL")
		})
	}

	_, err := ParseEnv(env(map[string]string{"PSP_URL": "psp.example:8090"}))
	require.ErrorContains(t, err, "PSP_URL", "not an http(s) URL")
	cfg, err := ParseEnv(env(map[string]string{"PSP_URL": "https://psp.example"}))
	require.NoError(t, err)
	require.Equal(t, "https://psp.example", cfg.PSPURL)
}

// `reaper -h` used to start a reaper. Every spelling of help prints the
// usage on stdout and exits 0 without starting anything, even with a
// configuration it could run on.
func TestReaperHelpStartsNothing(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"DATABASE_URL":        testdb.NewURL(t),
		"PSP_URL":             PSPEmbedded,
		"REAPER_METRICS_ADDR": freeAddr(t),
	}
	for _, arg := range []string{"-h", "--help", "-help"} {
		r := runWithin(t, 5*time.Second, []string{arg}, vars)
		require.Equal(t, 0, r.code, arg)
		require.Contains(t, r.stdout, "Usage: reaper", arg)
		require.Contains(t, r.stdout, "PSP_URL", arg)
		require.Empty(t, r.stderr, arg)
		conn, err := net.DialTimeout("tcp", vars["REAPER_METRICS_ADDR"], time.Second)
		if err == nil {
			conn.Close()
		}
		require.Error(t, err, "%s: the metrics listener must not have started", arg)
	}

	// Anything else on the command line is a mistake, not a start.
	for _, args := range [][]string{{"--bogus"}, {"serve"}} {
		r := runWithin(t, 5*time.Second, args, vars)
		require.Equal(t, 2, r.code, "%v", args)
		require.Empty(t, r.stdout)
		require.Contains(t, r.stderr, "reaper -h")
	}
}

// METRICS_ADDR, the api's name, is accepted; REAPER_METRICS_ADDR wins.
func TestReaperAcceptsMetricsAddr(t *testing.T) {
	t.Parallel()
	cfg, err := ParseEnv(env(map[string]string{"PSP_URL": PSPEmbedded, "METRICS_ADDR": "127.0.0.1:9191"}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9191", cfg.MetricsAddr)
	cfg, err = ParseEnv(env(map[string]string{"PSP_URL": PSPEmbedded, "METRICS_ADDR": "127.0.0.1:9191", "REAPER_METRICS_ADDR": "127.0.0.1:9292"}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9292", cfg.MetricsAddr)
}

// `reaper -h` names every variable the reaper reads: each name ParseEnv
// asks for is in the usage (it once left out GIVE_UP_AFTER, RETRY_BASE and
// RETRY_MAX, which the reaper's schedule depends on).
func TestReaperHelpNamesEveryVariable(t *testing.T) {
	t.Parallel()
	asked := map[string]bool{}
	_, err := ParseEnv(func(name string) string {
		asked[name] = true
		if name == "PSP_URL" {
			return "https://psp.example"
		}
		return ""
	})
	require.NoError(t, err)
	for _, must := range []string{"GIVE_UP_AFTER", "RETRY_BASE", "RETRY_MAX", "LEASE", "DATABASE_URL"} {
		require.True(t, asked[must], "ParseEnv no longer reads %s: is this test still reading the right function?", must)
	}
	for name := range asked {
		require.Regexp(t, `(^|[^A-Z_])`+name+`([^A-Z_]|$)`, usage, "reaper -h does not name %s", name)
	}
}
