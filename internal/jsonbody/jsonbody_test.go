package jsonbody_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/jsonbody"
)

type inner struct {
	Order string `json:"order"`
}

type params struct {
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"`
	Note     *string           `json:"note,omitempty"`
	Metadata map[string]string `json:"metadata"`
	Inner    *inner            `json:"inner"`
	List     []inner           `json:"list"`
	Ignored  string            `json:"-"`
	Any      any               `json:"any"`
	embedded
}

type embedded struct {
	Kind string `json:"kind"`
}

// decode decodes body into params, returning the refusal as *Error.
func decode(t *testing.T, body string) (params, *jsonbody.Error) {
	t.Helper()
	var p params
	err := jsonbody.Decode([]byte(body), &p)
	if err == nil {
		return p, nil
	}
	var jerr *jsonbody.Error
	require.ErrorAs(t, err, &jerr, body)
	return p, jerr
}

func TestDecodeAccepts(t *testing.T) {
	t.Parallel()
	p, jerr := decode(t, ` {"amount":7,"currency":"usd","note":null,"metadata":{"a":"1","b":"é\ufffd"},`+
		`"inner":{"order":"\ud83d\ude00"},"list":[{"order":"x"}],"kind":"k"} `+"\n")
	require.Nil(t, jerr)
	require.Equal(t, int64(7), p.Amount)
	require.Equal(t, map[string]string{"a": "1", "b": "é\uFFFD"}, p.Metadata)
	require.Equal(t, "😀", p.Inner.Order)
	require.Equal(t, "k", p.Kind)
	require.Nil(t, p.Note)

	_, jerr = decode(t, `{"metadata":null,"inner":null,"list":null}`)
	require.Nil(t, jerr)
	_, jerr = decode(t, `{"any":{"Any":[null,{"x":true}],"other":1}}`)
	require.Nil(t, jerr, "an interface takes any names, only not two that fold alike")
	_, jerr = decode(t, `{}`)
	require.Nil(t, jerr)
}

// Each refusal names the member at fault ("" for the body as a whole).
func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"x":`, jsonbody.MaxDepth) + "1" + strings.Repeat("}", jsonbody.MaxDepth)
	cases := map[string]struct{ body, field string }{
		"not JSON":             {`{"amount":`, ""},
		"not an object":        {`[1]`, ""},
		"a string":             {`"x"`, ""},
		"null":                 {`null`, ""},
		"empty":                {``, ""},
		"trailing object":      {`{} {}`, ""},
		"trailing garbage":     {`{"amount":1}x`, ""},
		"unknown member":       {`{"amount":1,"extra":1}`, "extra"},
		"wrong case":           {`{"Amount":1}`, "Amount"},
		"wrong case nested":    {`{"inner":{"Order":"x"}}`, "inner.Order"},
		"wrong case in array":  {`{"list":[{"order":"x"},{"ORDER":"y"}]}`, "list[1].ORDER"},
		"duplicate":            {`{"amount":1,"amount":2}`, "amount"},
		"case variant":         {`{"amount":1,"AMOUNT":5000}`, "AMOUNT"},
		"kelvin sign variant":  {`{"kind":"a","\u212Aind":"b"}`, "\u212Aind"},
		"map duplicate":        {`{"metadata":{"a":"1","a":"2"}}`, "metadata.a"},
		"map case variant":     {`{"metadata":{"a":"1","A":"2"}}`, "metadata.A"},
		"NUL in value":         {`{"currency":"us\u0000d"}`, "currency"},
		"NUL in map value":     {`{"metadata":{"a":"\u0000"}}`, "metadata.a"},
		"NUL in name":          {`{"metadata":{"a\u0000":"1"}}`, "metadata.a\x00"},
		"lone high surrogate":  {`{"currency":"\ud800"}`, "currency"},
		"lone low surrogate":   {`{"currency":"x\udc00y"}`, "currency"},
		"reversed pair":        {`{"currency":"\udc00\ud800"}`, "currency"},
		"high then non-low":    {`{"currency":"\ud800\u0041"}`, "currency"},
		"surrogate in name":    {`{"metadata":{"\ud800":"1"}}`, "metadata.\uFFFD"},
		"invalid UTF-8":        {"{\"currency\":\"\xff\"}", ""},
		"case variant in any":  {`{"any":{"x":1,"X":2}}`, "any.X"},
		"null amount":          {`{"amount":null}`, "amount"},
		"null map value":       {`{"metadata":{"a":null}}`, "metadata.a"},
		"wrong type":           {`{"amount":"1"}`, "amount"},
		"fraction":             {`{"amount":1.5}`, "amount"},
		"exponent":             {`{"amount":1e3}`, "amount"},
		"overflow":             {`{"amount":99999999999999999999}`, "amount"},
		"map of wrong type":    {`{"metadata":{"a":1}}`, "metadata.a"},
		"object for a string":  {`{"currency":{}}`, "currency"},
		"array for an object":  {`{"inner":[]}`, "inner"},
		"string for an array":  {`{"list":"x"}`, "list"},
		"bool for a number":    {`{"amount":true}`, "amount"},
		"too deep":             {`{"any":` + deep + `}`, "any" + strings.Repeat(".x", jsonbody.MaxDepth-1)},
		"ignored field by tag": {`{"Ignored":"x"}`, "Ignored"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, jerr := decode(t, c.body)
			require.NotNil(t, jerr, "accepted %q", c.body)
			require.Equal(t, c.field, jerr.Field, jerr.Message)
		})
	}
}

func TestDecodeNeedsAPointer(t *testing.T) {
	t.Parallel()
	var p params
	err := jsonbody.Decode([]byte(`{}`), p)
	require.Error(t, err)
	var jerr *jsonbody.Error
	require.NotErrorAs(t, err, &jerr, "a caller's bug is not the client's fault")
}

// An escaped backslash before a "u" is not a \u escape, and an escaped
// U+FFFD is a real character, not a lone surrogate.
func TestDecodeEscapesThatLookLikeSurrogates(t *testing.T) {
	t.Parallel()
	p, jerr := decode(t, `{"currency":"\\ud800\ufffd"}`)
	require.Nil(t, jerr)
	require.Equal(t, `\ud800`+"\uFFFD", p.Currency)
}

// FuzzDecode: whatever the body, Decode never panics, and what it accepts
// encoding/json reads the same way, with no name that folds onto another.
func FuzzDecode(f *testing.F) {
	f.Add(`{"amount":1,"currency":"usd","metadata":{"a":"b"}}`)
	f.Add(`{"amount":100,"AMOUNT":5000}`)
	f.Add(`{"currency":"\ud800\udc00","list":[{"order":"\u0000"}]}`)
	f.Add(`{"inner":{"order":"x"},"kind":"k"} `)
	f.Fuzz(func(t *testing.T, body string) {
		var p params
		if jsonbody.Decode([]byte(body), &p) != nil {
			return
		}
		require.True(t, utf8.ValidString(body))
		require.True(t, json.Valid([]byte(body)))
		require.NotContains(t, fmt.Sprintf("%#v", p), `\x00`)
		// What was accepted is a fixed point: its encoding decodes back to
		// the same value, strictly.
		enc, err := json.Marshal(p)
		require.NoError(t, err)
		var again params
		require.NoError(t, jsonbody.Decode(enc, &again), string(enc))
		require.Equal(t, p, again)
	})
}
