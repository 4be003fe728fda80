package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/client"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	desc := "order 42"
	baseEnv := map[string]string{"PHASEPAY_API_KEY": "sk_env", "HOME": "/home/u"}
	charge := []string{"charge", "--amount", "1000", "--currency", "usd", "--payment-method", "pm_card_visa"}

	for _, tt := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(m *Main) // checks on success
		wantErr string
	}{
		{
			name: "ChargeDefaults",
			args: charge,
			env:  baseEnv,
			want: func(m *Main) {
				require.Equal(t, "charge", m.Command)
				require.Equal(t, APIURLDefault, m.APIURL)
				require.Equal(t, "sk_env", m.APIKey)
				require.Equal(t, "/home/u/.local/state/phasepay/journal", m.JournalDir)
				require.Equal(t, client.MaxElapsedDefault, m.MaxElapsed)
				require.Equal(t, client.ChargeParams{Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa"}, m.Params)
			},
		},
		{
			name: "EnvOverDefaults",
			args: charge,
			env: map[string]string{"PHASEPAY_API_URL": "http://api:9000", "PHASEPAY_API_KEY": "sk_env",
				"PHASEPAY_JOURNAL": "/var/j", "XDG_STATE_HOME": "/state", "HOME": "/home/u"},
			want: func(m *Main) {
				require.Equal(t, "http://api:9000", m.APIURL)
				require.Equal(t, "/var/j", m.JournalDir)
			},
		},
		{
			name: "XDGStateHome",
			args: charge,
			env:  map[string]string{"PHASEPAY_API_KEY": "k", "XDG_STATE_HOME": "/state", "HOME": "/home/u"},
			want: func(m *Main) { require.Equal(t, "/state/phasepay/journal", m.JournalDir) },
		},
		{
			name: "RelativeXDGIsIgnored",
			args: charge,
			env:  map[string]string{"PHASEPAY_API_KEY": "k", "XDG_STATE_HOME": "state", "HOME": "/home/u"},
			want: func(m *Main) { require.Equal(t, "/home/u/.local/state/phasepay/journal", m.JournalDir) },
		},
		{
			name: "FlagsOverEnvBeforeAndAfterCommand",
			args: []string{"--api-url", "http://flag:1", "charge", "--amount=5", "--currency", "eur", "--payment-method", "pm_x",
				"--api-key", "sk_flag", "--journal", "/tmp/j", "--max-elapsed", "10s",
				"--description", desc, "--metadata", "order=42", "--metadata", "note=a=b"},
			env: map[string]string{"PHASEPAY_API_URL": "http://env:1", "PHASEPAY_API_KEY": "sk_env", "PHASEPAY_JOURNAL": "/env/j"},
			want: func(m *Main) {
				require.Equal(t, "http://flag:1", m.APIURL)
				require.Equal(t, "sk_flag", m.APIKey)
				require.Equal(t, "/tmp/j", m.JournalDir)
				require.Equal(t, 10*time.Second, m.MaxElapsed)
				require.Equal(t, client.ChargeParams{Amount: 5, Currency: "eur", PaymentMethod: "pm_x", Description: &desc,
					Metadata: map[string]string{"order": "42", "note": "a=b"}}, m.Params)
			},
		},
		{
			name: "EmptyDescriptionIsSent",
			args: append(append([]string{}, charge...), "--description", ""),
			env:  baseEnv,
			want: func(m *Main) {
				require.NotNil(t, m.Params.Description)
				require.Empty(t, *m.Params.Description)
			},
		},
		{
			name: "GetWithFlagAfterID",
			args: []string{"get", "ch_123", "--api-key", "sk_flag"},
			env:  map[string]string{},
			want: func(m *Main) {
				require.Equal(t, "get", m.Command)
				require.Equal(t, "ch_123", m.ChargeID)
				require.Equal(t, "sk_flag", m.APIKey)
				require.Empty(t, m.JournalDir, "get needs no journal")
			},
		},
		{
			name: "Resume",
			args: []string{"resume"},
			env:  baseEnv,
			want: func(m *Main) { require.Equal(t, "resume", m.Command) },
		},
		{name: "Help", args: []string{"-h"}, env: baseEnv, wantErr: errHelp.Error()},
		{name: "SubcommandHelp", args: []string{"charge", "--help"}, env: baseEnv, wantErr: errHelp.Error()},
		{name: "NoCommand", args: nil, env: baseEnv, wantErr: "missing command"},
		{name: "UnknownCommand", args: []string{"bogus"}, env: baseEnv, wantErr: `unknown command "bogus"`},
		{name: "UnknownFlag", args: []string{"charge", "--colour", "red"}, env: baseEnv, wantErr: "flag provided but not defined"},
		{name: "MissingAmount", args: []string{"charge", "--currency", "usd", "--payment-method", "pm_x"}, env: baseEnv, wantErr: "--amount is required"},
		{name: "MissingPaymentMethod", args: []string{"charge", "--amount", "1", "--currency", "usd"}, env: baseEnv, wantErr: "--payment-method is required"},
		{name: "BadAmount", args: []string{"charge", "--amount", "ten", "--currency", "usd", "--payment-method", "pm_x"}, env: baseEnv, wantErr: "invalid value"},
		{name: "BadMetadata", args: append(append([]string{}, charge...), "--metadata", "novalue"), env: baseEnv, wantErr: "not KEY=VALUE"},
		{name: "DuplicateMetadata", args: append(append([]string{}, charge...), "--metadata", "a=1", "--metadata", "a=2"), env: baseEnv, wantErr: "given twice"},
		{name: "ChargeExtraArgument", args: append(append([]string{}, charge...), "extra"), env: baseEnv, wantErr: `unexpected argument "extra"`},
		{name: "NoAPIKey", args: charge, env: map[string]string{"HOME": "/home/u"}, wantErr: "missing API key"},
		{name: "GetWithoutID", args: []string{"get"}, env: baseEnv, wantErr: "exactly one charge id"},
		{name: "GetTwoIDs", args: []string{"get", "ch_1", "ch_2"}, env: baseEnv, wantErr: "exactly one charge id"},
		{name: "ResumeExtraArgument", args: []string{"resume", "now"}, env: baseEnv, wantErr: `unexpected argument "now"`},
		{name: "NoJournalDir", args: []string{"resume"}, env: map[string]string{"PHASEPAY_API_KEY": "k"}, wantErr: "no journal directory"},
		{name: "ZeroMaxElapsed", args: []string{"resume", "--max-elapsed", "0s"}, env: baseEnv, wantErr: "--max-elapsed must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := NewMain()
			err := m.ParseFlags(tt.args, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.want(m)
		})
	}
}
