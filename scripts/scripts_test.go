// Package scripts_test runs the shell scripts of `make run` and `make test`
// the way the Makefile does.
package scripts_test

import (
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testdb"
)

// closedAddr returns a loopback host and port on which nothing listens.
func closedAddr(t *testing.T) (string, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(l.Addr().String())
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return host, port
}

// ensure-postgres must check the server DATABASE_URL names, not a fixed
// 127.0.0.1:5432: a URL naming a dead port fails with that port in its one
// line, whether it comes as the argument or from DATABASE_URL, in URL or
// keyword=value form.
func TestEnsurePostgresChecksTheServerOfDatabaseURL(t *testing.T) {
	t.Parallel()
	host, port := closedAddr(t)
	for name, tc := range map[string]struct{ arg, env string }{
		"argument URL":           {arg: "postgres://postgres@" + host + ":" + port + "/phasepay?sslmode=disable"},
		"argument keyword=value": {arg: "host=" + host + " port=" + port + " user=postgres dbname=phasepay"},
		"DATABASE_URL":           {env: "postgres://u:secret@" + host + ":" + port + "/x"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("./ensure-postgres")
			if tc.arg != "" {
				cmd.Args = append(cmd.Args, tc.arg)
			}
			cmd.Env = append(cmd.Environ(), "DATABASE_URL="+tc.env)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "%s", out)
			msg := strings.TrimSpace(string(out))
			require.Contains(t, msg, host+":"+port)
			require.NotContains(t, msg, "\n", "one line")
			require.NotContains(t, msg, "secret", "never print a password")
		})
	}
}

// The server the tests run against answers, so the script says nothing and
// succeeds for its URL.
func TestEnsurePostgresAcceptsALiveServer(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("./ensure-postgres", testdb.Admin(t))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(string(out)))
}
