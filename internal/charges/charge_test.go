package charges_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
)

func TestParseCreateParams(t *testing.T) {
	t.Parallel()
	ok := []string{
		`{"amount":1,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"amount":9007199254740991,"currency":"jpy","payment_method":"pm_x","description":null,"metadata":null}`,
		`{"amount":1000,"currency":"eur","payment_method":"pm_x","description":"d","metadata":{"order":"42"}}`,
	}
	for _, body := range ok {
		_, err := charges.ParseCreateParams([]byte(body))
		require.NoError(t, err, body)
	}

	bad := map[string]string{
		`{"amount":0,"currency":"usd","payment_method":"pm_x"}`:                    "amount",
		`{"amount":-5,"currency":"usd","payment_method":"pm_x"}`:                   "amount",
		`{"amount":1.5,"currency":"usd","payment_method":"pm_x"}`:                  "amount",
		`{"amount":"100","currency":"usd","payment_method":"pm_x"}`:                "amount",
		`{"amount":9007199254740992,"currency":"usd","payment_method":"pm_x"}`:     "amount",
		`{"currency":"usd","payment_method":"pm_x"}`:                               "amount",
		`{"amount":1,"currency":"USD","payment_method":"pm_x"}`:                    "currency",
		`{"amount":1,"currency":"zzz","payment_method":"pm_x"}`:                    "currency",
		`{"amount":1,"currency":"usd","payment_method":"card"}`:                    "payment_method",
		`{"amount":1,"currency":"usd","payment_method":"pm_x","extra":1}`:          "extra",
		`{"amount":1,"currency":"usd","payment_method":"pm_x","metadata":{"a":1}}`: "metadata",
		`{"amount":1,"currency":"usd","payment_method":"pm_x"} {}`:                 "",
		`{"amount":1,"currency":"usd","payment_method":"pm_x"`:                     "",
		`[1]`: "",
		`{"amount":1,"currency":"usd","payment_method":"pm_x","description":"` + strings.Repeat("d", 1001) + `"}`: "description",
	}
	for body, field := range bad {
		_, err := charges.ParseCreateParams([]byte(body))
		var verr *charges.ValidationError
		require.ErrorAs(t, err, &verr, body)
		require.Equal(t, field, verr.Fields[0].Field, body)
	}
}
