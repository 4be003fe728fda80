package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// The console's token is the operator's own: too short a one, or a
// tenant's API key, is bad configuration (exit 2, one line), before
// anything listens; and the message never repeats the key.
func TestConsoleRefusesATenantKeyAsItsToken(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)
	_, tenantKey := newTenantKey(t, testdb.Pool(t, dbURL, time.Time{}), "acme")
	for name, token := range map[string]string{
		"too short":           "short",
		"a tenant's API key":  tenantKey,
		"shaped like one too": "sk_" + strings.Repeat("x", 30),
	} {
		var out, errOut bytes.Buffer
		env := map[string]string{"DATABASE_URL": dbURL, "CONSOLE_TOKEN": token, "CONSOLE_ADDR": "127.0.0.1:0"}
		code := run([]string{"console"}, func(k string) string { return env[k] }, &out, &errOut)
		require.Equal(t, 2, code, "%s: %s", name, errOut.String())
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "one line: %q", errOut.String())
		require.Contains(t, errOut.String(), "CONSOLE_TOKEN")
		require.NotContains(t, errOut.String(), token)
		require.Empty(t, out.String(), "%s: nothing listens", name)
	}
}
