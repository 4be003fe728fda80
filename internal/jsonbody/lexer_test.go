package jsonbody

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

type lexInner struct {
	Order string `json:"order"`
}

type lexParams struct {
	Amount   int64             `json:"amount"`
	Ratio    float64           `json:"ratio"`
	Count    uint8             `json:"count"`
	OK       bool              `json:"ok"`
	Currency string            `json:"currency"`
	Note     *string           `json:"note,omitempty"`
	Metadata map[string]string `json:"metadata"`
	Inner    *lexInner         `json:"inner"`
	List     []lexInner        `json:"list"`
	Any      any               `json:"any"`
	Raw      json.RawMessage   `json:"raw"`
}

// lexerSeeds are valid JSON bodies that each walk a different way.
var lexerSeeds = []string{
	`{}`, `[1]`, `"x"`, `null`, `true`, `12`,
	` {"amount":7,"currency":"usd","note":null,"metadata":{"a":"1","b":"é\ufffd"},"inner":{"order":"\ud83d\ude00"},"list":[{"order":"x"}]} ` + "\n",
	`{"amount":1,"extra":1}`, `{"Amount":1}`, `{"inner":{"Order":"x"}}`, `{"list":[{"order":"x"},{"ORDER":"y"}]}`,
	`{"amount":1,"amount":2}`, `{"amount":1,"AMOUNT":5000}`, `{"currency":"a","\u212Aurrency":"b"}`,
	`{"metadata":{"a":"1","a":"2"}}`, `{"metadata":{"a":"1","A":"2"}}`, `{"currency":"us\u0000d"}`,
	`{"metadata":{"a\u0000":"1"}}`, `{"currency":"\ud800"}`, `{"currency":"x\udc00y"}`, `{"currency":"\udc00\ud800"}`,
	`{"currency":"\ud800\u0041"}`, `{"metadata":{"\ud800":"1"}}`, `{"currency":"\\ud800\ufffd"}`, `{"currency":"a\"b\\"}`,
	`{"amount":null}`, `{"metadata":{"a":null}}`, `{"amount":"1"}`, `{"amount":1.5}`, `{"amount":-1e3}`, `{"ratio":-1.5E+3}`,
	`{"amount":99999999999999999999}`, `{"count":256}`, `{"count":-1}`, `{"ok":false,"note":"n"}`, `{"ok":1}`,
	`{"metadata":{"a":1}}`, `{"currency":{}}`, `{"inner":[]}`, `{"list":"x"}`, `{"amount":true}`,
	`{"any":{"x":1,"X":2}}`, `{"any":[[],{},[{"a":[true,false,null,"s",-0.5e-7]}]]}`, `{"raw":{"A":1,"a":2}}`,
	`{"any":` + strings.Repeat(`{"x":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth) + `}`,
	`{"any":` + strings.Repeat(`[`, MaxDepth) + strings.Repeat("]", MaxDepth) + `}`,
	"{\n\t\"amount\" : 1 ,\r\n \"list\" : [ ] }",
}

// walkBoth walks body with the lexer and with encoding/json's tokenizer.
func walkBoth(body []byte) (lexed, decoded error) {
	t := reflect.TypeFor[lexParams]()
	lw := walker{src: &lexer{body: body}}
	dw := walker{src: newDecoderTokens(body)}
	return lw.walk(t), dw.walk(t)
}

// TestLexerMatchesDecoder: on a valid body, the lexer Decode uses refuses
// exactly what encoding/json's tokenizer refuses, with the same error.
func TestLexerMatchesDecoder(t *testing.T) {
	t.Parallel()
	for _, body := range lexerSeeds {
		require.True(t, json.Valid([]byte(body)), body)
		lexed, decoded := walkBoth([]byte(body))
		require.Equal(t, decoded, lexed, body)
	}
}

func FuzzLexerMatchesDecoder(f *testing.F) {
	for _, body := range lexerSeeds {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if !utf8.ValidString(body) || !json.Valid([]byte(body)) {
			return
		}
		lexed, decoded := walkBoth([]byte(body))
		require.Equal(t, decoded, lexed, body)
	})
}

// BenchmarkDecode decodes a charge-sized body; "decoder" forces the
// tokenizer path every invalid body takes.
func BenchmarkDecode(b *testing.B) {
	body := []byte(`{"amount":1999,"currency":"usd","payment_method":"pm_card_visa","description":"order 1234","metadata":{"order":"1234","customer":"c_42"}}`)
	type charge struct {
		Amount        int64             `json:"amount"`
		Currency      string            `json:"currency"`
		PaymentMethod string            `json:"payment_method"`
		Description   *string           `json:"description"`
		Metadata      map[string]string `json:"metadata"`
	}
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c charge
			if err := Decode(body, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := walker{src: newDecoderTokens(body)}
			if err := w.walk(reflect.TypeFor[charge]()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lexer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := walker{src: &lexer{body: body}}
			if err := w.walk(reflect.TypeFor[charge]()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
