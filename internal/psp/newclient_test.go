package psp

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewClient(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c, err := NewClient(ClientConfig{BaseURL: "http://test/base/"})
		require.NoError(t, err)
		require.Equal(t, "http://test/base/v1/authorizations", c.endpoint)
		require.Equal(t, AttemptTimeoutDefault, c.cfg.AttemptTimeout)
		require.Equal(t, MaxAttemptsDefault, c.cfg.MaxAttempts)
		require.Equal(t, InitialBackoffDefault, c.cfg.InitialBackoff)
		require.Equal(t, MaxBackoffDefault, c.cfg.MaxBackoff)
		require.NotNil(t, c.cfg.HTTPClient)
		require.NotSame(t, http.DefaultClient, c.cfg.HTTPClient)
		require.IsType(t, &Transport{}, c.cfg.HTTPClient.Transport)
	})

	for name, cfg := range map[string]ClientConfig{
		"NoBaseURL":              {},
		"RelativeURL":            {BaseURL: "/psp"},
		"NoHost":                 {BaseURL: "http://"},
		"OtherScheme":            {BaseURL: "ftp://test"},
		"Unparsable":             {BaseURL: "http://test/%zz"},
		"NegativeTimeout":        {BaseURL: "http://test", AttemptTimeout: -time.Second},
		"NegativeAttempts":       {BaseURL: "http://test", MaxAttempts: -1},
		"NegativeBackoff":        {BaseURL: "http://test", InitialBackoff: -time.Millisecond},
		"MaxBackoffBelowInitial": {BaseURL: "http://test", InitialBackoff: 2 * time.Second, MaxBackoff: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := NewClient(cfg)
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "psp client: "), err.Error())
		})
	}
}
