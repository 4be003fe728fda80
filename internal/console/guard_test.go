package console

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// The guard of hosts admits the listen address, localhost at its port and
// the names it was given; an unspecified listen address admits IP
// literals at its port (no rebinding names an IP), never another name.
func TestHostGuardAdmitsOnlyTheConsolesNames(t *testing.T) {
	t.Parallel()
	g, err := newHostGuard("0.0.0.0:8081", []string{"Console.Example.", "proxy.example:8443"})
	require.NoError(t, err)
	for host, want := range map[string]bool{
		"10.1.2.3:8081": true, "[::1]:8081": true, "localhost:8081": true, "console.example": true,
		"console.example:443": true, "CONSOLE.example.:8081": true, "proxy.example:8443": true,
		"10.1.2.3:8082": false, "evil.example:8081": false, "proxy.example": false, "localhost:8082": false,
		"": false, "localhost.evil.example:8081": false,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		require.Equal(t, want, g.admits(r), "%q", host)
	}
	_, err = newHostGuard("127.0.0.1:8081", []string{"https://console.example/"})
	require.Error(t, err, "a URL is not a host name")
}
