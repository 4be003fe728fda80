package history

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// h builds a hand-made history: each op is one request under key "k" of
// tenant "t"; call and ret in arbitrary units, ret 0 for a lost answer.
type h []Op

const (
	charge  = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`
	other   = `{"amount":1001,"currency":"usd","payment_method":"pm_card_visa"}`
	created = "a1"
	another = "a2"
)

func op(call, ret int64, body string, status int, code, answer string, replayed bool) Op {
	o := Op{Tenant: "t", Key: "k", Method: "POST", Path: "/v1/charges", Body: body, Call: call, Return: ret,
		Status: status, Code: code, Answer: answer, Replayed: replayed}
	if ret == 0 {
		o.Status, o.Code, o.Answer, o.Err = 0, "", "", "context deadline exceeded"
	}
	return o
}

// unsent makes o a request whose connection was refused.
func unsent(o Op) Op {
	o.Unsent, o.Err = true, "dial tcp 127.0.0.1:1: connect: connection refused"
	return o
}

func TestModelAcceptsWhatTheContractAllows(t *testing.T) {
	t.Parallel()
	for name, ops := range map[string]h{
		"one request":    {op(1, 2, charge, 201, "", created, false)},
		"a replay after": {op(1, 2, charge, 201, "", created, false), op(3, 4, charge, 201, "", created, true)},
		"the same JSON reordered and re-indented":            {op(1, 2, charge, 201, "", created, false), op(3, 4, `{ "currency": "usd", "payment_method": "pm_card_visa", "amount": 1000 }`, 201, "", created, true)},
		"a decline, replayed":                                {op(1, 2, charge, 402, "card_declined", created, false), op(3, 4, charge, 402, "card_declined", created, true)},
		"409 and 503 before the answer":                      {op(1, 5, charge, 503, "psp_unavailable", "p", false), op(2, 3, charge, 409, "idempotency_key_in_use", "p2", false), op(6, 7, charge, 201, "", created, false)},
		"finished in the background, first seen as a replay": {op(1, 2, charge, 503, "psp_unavailable", "p", false), op(3, 4, charge, 201, "", created, true)},
		"a 503 overlapping the final answer":                 {op(1, 2, charge, 201, "", created, false), op(0, 9, charge, 503, "psp_unavailable", "p", false)},
		"a different body after the answer is 422":           {op(1, 2, charge, 201, "", created, false), op(3, 4, other, 422, "idempotency_key_mismatch", "m", false)},
		"another path under the key is 422": {op(1, 2, charge, 201, "", created, false), func() Op {
			o := op(3, 4, charge, 422, "idempotency_key_mismatch", "m", false)
			o.Path = "/v1/refunds"
			return o
		}()},
		"a 422 after a lost request of another body":        {op(1, 0, other, 0, "", "", false), op(3, 4, charge, 422, "idempotency_key_mismatch", "m", false)},
		"a lost answer, then the answer as a replay":        {op(1, 0, charge, 0, "", "", false), op(5, 6, charge, 201, "", created, true)},
		"a lost request of another body that never arrived": {op(1, 0, other, 0, "", "", false), op(3, 4, charge, 201, "", created, false)},
		"database unavailable after the answer":             {op(1, 2, charge, 201, "", created, false), op(3, 4, charge, 503, "database_unavailable", "d", false)},
		"invalid bodies change nothing":                     {op(1, 2, `{"amount":-1}`, 400, "invalid_request", "i", false), op(3, 4, charge, 201, "", created, false)},
		"a capture refused in the charge's state, replayed": {op(1, 2, `{}`, 400, "charge_not_capturable", "n", false), op(3, 4, `{}`, 400, "charge_not_capturable", "n", true)},
		"payment_unresolved, again":                         {op(1, 2, charge, 503, "payment_unresolved", "u", false), op(3, 4, charge, 503, "payment_unresolved", "u", false)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v, draw := Check(ops, 0)
			require.Equal(t, Accepted, v.Verdict, "%+v", v)
			require.Nil(t, draw)
			require.Equal(t, 1, v.Partitions)
		})
	}
}

func TestModelRejectsWhatTheContractForbids(t *testing.T) {
	t.Parallel()
	for name, ops := range map[string]h{
		"two different 2xx bodies under one key":       {op(1, 2, charge, 201, "", created, false), op(3, 4, charge, 201, "", another, true)},
		"a replay differing by a byte":                 {op(1, 2, charge, 201, "", digest([]byte(`{"id":"ch_1"}`)), false), op(3, 4, charge, 201, "", digest([]byte(`{"id":"ch_2"}`)), true)},
		"a 402 after a 201":                            {op(1, 2, charge, 201, "", created, false), op(3, 4, charge, 402, "card_declined", another, true)},
		"a 2xx after a 422 for the same body":          {op(1, 2, other, 201, "", created, false), op(3, 4, charge, 422, "idempotency_key_mismatch", "m", false), op(5, 6, charge, 201, "", another, false)},
		"a 422 for the key's own request":              {op(1, 2, charge, 201, "", created, false), op(3, 4, charge, 422, "idempotency_key_mismatch", "m", false)},
		"a 422 on a key nobody holds":                  {op(1, 2, charge, 422, "idempotency_key_mismatch", "m", false)},
		"a different body answered, not refused":       {op(1, 2, charge, 201, "", created, false), op(3, 4, other, 201, "", another, false)},
		"a 409 after the final answer":                 {op(1, 2, charge, 201, "", created, false), op(3, 4, charge, 409, "idempotency_key_in_use", "p", false)},
		"a 503 psp_unavailable after the final answer": {op(1, 2, charge, 201, "", created, false), op(3, 4, charge, 503, "psp_unavailable", "p", false)},
		"a replay header on a 409":                     {op(1, 2, charge, 409, "idempotency_key_in_use", "p", true)},
		"a lost answer does not excuse two answers":    {op(1, 0, charge, 0, "", "", false), op(2, 3, charge, 201, "", created, false), op(4, 5, charge, 201, "", another, true)},
		"a request never sent holds no key":            {unsent(op(1, 0, other, 0, "", "", false)), op(3, 4, charge, 422, "idempotency_key_mismatch", "m", false)},
		"an answer run again after a client had it":    {op(1, 2, charge, 402, "card_declined", created, true), op(3, 4, charge, 402, "card_declined", created, false)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v, draw := Check(ops, 0)
			require.Equal(t, Rejected, v.Verdict, "%+v", v)
			require.Equal(t, 1, v.Rejected)
			require.Equal(t, []string{"t/k"}, v.RejectedKeys)
			require.NotNil(t, draw)
			var b bytes.Buffer
			require.NoError(t, draw(&b))
			require.Contains(t, b.String(), "<html")
		})
	}
}

// TestCheckPartitionsByTenantAndKey: the same key of two tenants is two
// requests, and one key's rejection names it alone.
func TestCheckPartitionsByTenantAndKey(t *testing.T) {
	t.Parallel()
	a := op(1, 2, charge, 201, "", created, false)
	b := op(3, 4, other, 201, "", another, false)
	b.Tenant = "u"
	c := op(5, 6, charge, 201, "", another, true)
	c.Key = "k2"
	d := op(7, 8, charge, 201, "", created, true)
	d.Key = "k2"
	unkeyed := Op{Tenant: "t", Method: "POST", Path: "/v1/webhook_endpoints", Call: 1, Return: 2, Status: 201}
	v, _ := Check([]Op{a, b, c, d, unkeyed}, 0)
	require.Equal(t, Rejected, v.Verdict)
	require.Equal(t, 3, v.Partitions)
	require.Equal(t, 4, v.Checked)
	require.Equal(t, 5, v.Operations)
	require.Equal(t, []string{"t/k2"}, v.RejectedKeys)
}
