package main

import (
	"cmp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

func TestParseEnv(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		env     map[string]string
		addr    string
		faults  mockpsp.Faults
		mock    string        // MOCKPSP_NAME; empty means the default
		ttl     time.Duration // MOCKPSP_KEY_TTL; zero means the default
		wantErr string
	}{
		{name: "Defaults", addr: "127.0.0.1:8090"},
		{
			name: "All",
			env: map[string]string{
				"MOCKPSP_ADDR": "0.0.0.0:9000", "MOCKPSP_ERROR_RATE": "0.25",
				"MOCKPSP_DROP_RATE": "1", "MOCKPSP_LATENCY": "50ms",
				"MOCKPSP_REJECT_RATE": "0.5", "MOCKPSP_LOOKUP_ERROR_RATE": "0.125",
				"MOCKPSP_NAME": "secondary", "MOCKPSP_KEY_TTL": "90s",
			},
			addr:   "0.0.0.0:9000",
			faults: mockpsp.Faults{ErrorRate: 0.25, DropRate: 1, RejectRate: 0.5, LookupErrorRate: 0.125, LatencyMS: 50},
			mock:   "secondary",
			ttl:    90 * time.Second,
		},
		{name: "EmptyMeansDefault", env: map[string]string{"MOCKPSP_ADDR": " ", "MOCKPSP_ERROR_RATE": ""}, addr: "127.0.0.1:8090"},
		{name: "PortZero", env: map[string]string{"MOCKPSP_ADDR": "127.0.0.1:0"}, addr: "127.0.0.1:0"},
		{name: "LatencyBareMilliseconds", env: map[string]string{"MOCKPSP_LATENCY": "75"}, addr: "127.0.0.1:8090", faults: mockpsp.Faults{LatencyMS: 75}},
		{name: "LatencySeconds", env: map[string]string{"MOCKPSP_LATENCY": "1.5s"}, addr: "127.0.0.1:8090", faults: mockpsp.Faults{LatencyMS: 1500}},
		{name: "LatencyZero", env: map[string]string{"MOCKPSP_LATENCY": "0"}, addr: "127.0.0.1:8090"},
		{name: "RateZero", env: map[string]string{"MOCKPSP_DROP_RATE": "0"}, addr: "127.0.0.1:8090"},

		{name: "ErrorRateAboveOne", env: map[string]string{"MOCKPSP_ERROR_RATE": "1.5"}, wantErr: "MOCKPSP_ERROR_RATE: must be between 0 and 1"},
		{name: "ErrorRateNegative", env: map[string]string{"MOCKPSP_ERROR_RATE": "-0.1"}, wantErr: "MOCKPSP_ERROR_RATE: must be between 0 and 1"},
		{name: "ErrorRateNaN", env: map[string]string{"MOCKPSP_ERROR_RATE": "NaN"}, wantErr: "MOCKPSP_ERROR_RATE: must be between 0 and 1"},
		{name: "ErrorRatePercent", env: map[string]string{"MOCKPSP_ERROR_RATE": "50%"}, wantErr: `MOCKPSP_ERROR_RATE: "50%" is not a number`},
		{name: "DropRateAboveOne", env: map[string]string{"MOCKPSP_DROP_RATE": "2"}, wantErr: "MOCKPSP_DROP_RATE: must be between 0 and 1"},
		{name: "DropRateWord", env: map[string]string{"MOCKPSP_DROP_RATE": "half"}, wantErr: `MOCKPSP_DROP_RATE: "half" is not a number`},
		{name: "LatencyNegative", env: map[string]string{"MOCKPSP_LATENCY": "-5ms"}, wantErr: "MOCKPSP_LATENCY: \"-5ms\": must not be negative"},
		{name: "LatencyNegativeNumber", env: map[string]string{"MOCKPSP_LATENCY": "-5"}, wantErr: "MOCKPSP_LATENCY: \"-5\": must not be negative"},
		{name: "LatencySubMillisecond", env: map[string]string{"MOCKPSP_LATENCY": "500us"}, wantErr: "MOCKPSP_LATENCY: \"500us\": must be a whole number of milliseconds"},
		{name: "LatencyGarbage", env: map[string]string{"MOCKPSP_LATENCY": "soon"}, wantErr: "MOCKPSP_LATENCY: \"soon\" is neither a duration"},
		{name: "LatencyHuge", env: map[string]string{"MOCKPSP_LATENCY": "99999999999999999"}, wantErr: "too long"},
		{name: "RejectRateAboveOne", env: map[string]string{"MOCKPSP_REJECT_RATE": "1.1"}, wantErr: "MOCKPSP_REJECT_RATE: must be between 0 and 1"},
		{name: "LookupErrorRateWord", env: map[string]string{"MOCKPSP_LOOKUP_ERROR_RATE": "often"}, wantErr: `MOCKPSP_LOOKUP_ERROR_RATE: "often" is not a number`},
		{name: "KeyTTLNotADuration", env: map[string]string{"MOCKPSP_KEY_TTL": "1 day"}, wantErr: `MOCKPSP_KEY_TTL: "1 day" is not a duration`},
		{name: "KeyTTLBareNumber", env: map[string]string{"MOCKPSP_KEY_TTL": "60"}, wantErr: `MOCKPSP_KEY_TTL: "60" is not a duration`},
		{name: "KeyTTLZero", env: map[string]string{"MOCKPSP_KEY_TTL": "0s"}, wantErr: `MOCKPSP_KEY_TTL: "0s": must be positive`},
		{name: "AddrWithoutPort", env: map[string]string{"MOCKPSP_ADDR": "localhost"}, wantErr: `MOCKPSP_ADDR: "localhost" is not host:port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := NewMain()
			err := m.ParseEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.addr, m.ListenAddr)
			require.Equal(t, tt.faults, m.Faults)
			require.Equal(t, cmp.Or(tt.mock, mockpsp.NameDefault), m.Name)
			require.Equal(t, cmp.Or(tt.ttl, mockpsp.KeyTTLDefault), m.KeyTTL)
		})
	}
}
