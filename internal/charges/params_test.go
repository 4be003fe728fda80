package charges_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/api"
	"github.com/phasepay/phasepay/internal/charges"
)

func TestParseCreateParams(t *testing.T) {
	t.Parallel()
	ok := []string{
		`{"amount":1,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"amount":9007199254740991,"currency":"jpy","payment_method":"pm_x","description":null,"metadata":null}`,
		`{"amount":1000,"currency":"eur","payment_method":"pm_x","description":"d","metadata":{"order":"42"}}`,
		`{"amount":1,"currency":"usd","payment_method":"pm_` + strings.Repeat("A_z9", 25) + `"}`,
	}
	for _, body := range ok {
		_, err := charges.ParseCreateParams([]byte(body))
		require.NoError(t, err, body)
	}

	bad := map[string]string{
		`{"amount":0,"currency":"usd","payment_method":"pm_x"}`:                    "amount",
		`{"amount":-5,"currency":"usd","payment_method":"pm_x"}`:                   "amount",
		`{"amount":1.5,"currency":"usd","payment_method":"pm_x"}`:                  "amount",
		`{"amount":1e3,"currency":"usd","payment_method":"pm_x"}`:                  "amount",
		`{"amount":"100","currency":"usd","payment_method":"pm_x"}`:                "amount",
		`{"amount":null,"currency":"usd","payment_method":"pm_x"}`:                 "amount",
		`{"amount":9007199254740992,"currency":"usd","payment_method":"pm_x"}`:     "amount",
		`{"currency":"usd","payment_method":"pm_x"}`:                               "amount",
		`{"amount":1,"currency":"USD","payment_method":"pm_x"}`:                    "currency",
		`{"amount":1,"currency":"zzz","payment_method":"pm_x"}`:                    "currency",
		`{"amount":1,"currency":"usd","payment_method":"card"}`:                    "payment_method",
		`{"amount":1,"currency":"usd","payment_method":"pm_x","extra":1}`:          "extra",
		`{"amount":1,"currency":"usd","payment_method":"pm_x","metadata":{"a":1}}`: "metadata.a",
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

// encoding/json matches member names case-insensitively and keeps the last
// of a repeated one: {"amount":100,"AMOUNT":5000} charged 5000 while the
// fingerprint covered both members. A name repeated in another case, or
// sent in the wrong case, is refused.
func TestCaseVariantDuplicateMemberIsRejected(t *testing.T) {
	t.Parallel()
	for body, field := range map[string]string{
		`{"amount":100,"AMOUNT":5000,"currency":"usd","payment_method":"pm_card_visa"}`:      "AMOUNT",
		`{"amount":100,"currency":"usd","Currency":"eur","payment_method":"pm_card_visa"}`:   "Currency",
		`{"Amount":100,"currency":"usd","payment_method":"pm_card_visa"}`:                    "Amount",
		`{"amount":100,"amount":5000,"currency":"usd","payment_method":"pm_card_visa"}`:      "amount",
		`{"amount":1,"currency":"usd","payment_method":"pm_x","metadata":{"k":"1","K":"2"}}`: "metadata.K",
	} {
		_, _, err := charges.ParseCreateRequest([]byte(body))
		var verr *charges.ValidationError
		require.ErrorAs(t, err, &verr, body)
		require.Equal(t, field, verr.Fields[0].Field, body)
	}
}

// PostgreSQL text rejects U+0000: a description holding one answered 500.
func TestNULInStringIsRejected(t *testing.T) {
	t.Parallel()
	for body, field := range map[string]string{
		`{"amount":1,"currency":"usd","payment_method":"pm_x","description":"a\u0000b"}`:  "description",
		`{"amount":1,"currency":"usd","payment_method":"pm_x","metadata":{"k":"\u0000"}}`: "metadata.k",
		`{"amount":1,"currency":"usd","payment_method":"pm_x","metadata":{"\u0000":"v"}}`: "metadata.\x00",
		`{"amount":1,"currency":"usd\u0000","payment_method":"pm_x"}`:                     "currency",
	} {
		_, err := charges.ParseCreateParams([]byte(body))
		var verr *charges.ValidationError
		require.ErrorAs(t, err, &verr, body)
		require.Equal(t, field, verr.Fields[0].Field, body)
	}
}

// "pm_" alone passed a prefix check, and the PSP refused it on every retry.
// The contract's pattern is checked up front.
func TestEmptyPaymentMethodSuffixIsRejected(t *testing.T) {
	t.Parallel()
	for _, pm := range []string{"pm_", "pm", "", "pm_a-b", "pm_é", "pm_a b", "PM_x", "pm_" + strings.Repeat("x", 101), " pm_x", "pm_x\n"} {
		body, err := json.Marshal(map[string]any{"amount": 1, "currency": "usd", "payment_method": pm})
		require.NoError(t, err)
		_, err = charges.ParseCreateParams(body)
		var verr *charges.ValidationError
		require.ErrorAs(t, err, &verr, pm)
		require.Equal(t, "payment_method", verr.Fields[0].Field, pm)
	}
}

// Limits count Unicode characters, as the OpenAPI document's maxLength
// does, not the bytes of their UTF-8 encoding.
func TestLengthLimitsCountCharacters(t *testing.T) {
	t.Parallel()
	body := func(desc, key, value string) []byte {
		b, err := json.Marshal(map[string]any{"amount": 1, "currency": "usd", "payment_method": "pm_x",
			"description": desc, "metadata": map[string]string{key: value}})
		require.NoError(t, err)
		return b
	}
	_, err := charges.ParseCreateParams(body(strings.Repeat("é", charges.MaxDescription),
		strings.Repeat("ключ", charges.MaxMetadataKeyLength/4), strings.Repeat("€", charges.MaxMetadataValue)))
	require.NoError(t, err)

	for _, b := range [][]byte{
		body(strings.Repeat("é", charges.MaxDescription+1), "k", "v"),
		body("d", strings.Repeat("é", charges.MaxMetadataKeyLength+1), "v"),
		body("d", "k", strings.Repeat("€", charges.MaxMetadataValue+1)),
	} {
		_, err := charges.ParseCreateParams(b)
		require.Error(t, err)
	}
}

// The fingerprint is taken from the parameters as parsed, and the stored
// body is their encoding: bodies that execute alike share it, bodies that
// execute differently do not, and the stored body reads back to exactly the
// parameters that ran.
func TestFingerprintCoversExactlyWhatRuns(t *testing.T) {
	t.Parallel()
	same := []string{
		visa,
		`{"payment_method":"pm_card_visa","currency":"usd","amount":1000}`,
		"{\n  \"amount\": 1000,\n\t\"currency\": \"usd\",\r\n  \"payment_method\": \"pm_card_visa\"\n}\n",
		`{"amount":1000,"currency":"\u0075sd","payment_method":"pm_card_visa"}`,
		`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","description":null}`,
		`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","metadata":null}`,
		`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","metadata":{}}`,
	}
	want, wantParams, err := charges.ParseCreateRequest([]byte(visa))
	require.NoError(t, err)
	require.Equal(t, visa, string(want.Body))
	for _, body := range same {
		got, params, err := charges.ParseCreateRequest([]byte(body))
		require.NoError(t, err, body)
		require.Equal(t, want.Fingerprint, got.Fingerprint, body)
		require.Equal(t, wantParams, params, body)
	}

	different := []string{
		`{"amount":1001,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"amount":1000,"currency":"eur","payment_method":"pm_card_visa"}`,
		`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","description":""}`,
		`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":""}}`,
	}
	seen := map[[32]byte]string{want.Fingerprint: visa}
	for _, body := range different {
		got, params, err := charges.ParseCreateRequest([]byte(body))
		require.NoError(t, err, body)
		require.NotContains(t, seen, [32]byte(got.Fingerprint), body)
		seen[got.Fingerprint] = body

		// What a takeover resumes from is what was parsed.
		stored, err := charges.ParseCreateParams(got.Body)
		require.NoError(t, err, string(got.Body))
		require.Equal(t, params, stored)
	}
}

// Reordered members, other white space and escapes of the same characters
// never change the fingerprint (a property over random requests).
func TestReorderedJSONHasTheSameFingerprint(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		p := randomParams(rnd)
		canon, err := json.Marshal(p)
		require.NoError(t, err)
		want, _, err := charges.ParseCreateRequest(canon)
		require.NoError(t, err, string(canon))
		for range 5 {
			body := scramble(rnd, p)
			got, params, err := charges.ParseCreateRequest([]byte(body))
			require.NoError(t, err, body)
			require.Equal(t, want.Fingerprint, got.Fingerprint, body)
			require.Equal(t, p, params, body)
		}
	}
}

// randomParams returns valid parameters, with strings that need escaping.
func randomParams(rnd *rand.Rand) charges.CreateParams {
	alphabet := []rune(`aZ09_ "\/<>&é€` + "\n\t\u2028😀\u007f\ufffd")
	str := func(n int) string {
		r := make([]rune, n)
		for i := range r {
			r[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		return string(r)
	}
	p := charges.CreateParams{
		Amount:        1 + rnd.Int64N(charges.MaxAmount),
		Currency:      []string{"usd", "eur", "jpy", "chf"}[rnd.IntN(4)],
		PaymentMethod: "pm_" + strings.Repeat("x", 1+rnd.IntN(charges.MaxPaymentMethodChars)),
	}
	if rnd.IntN(2) == 0 {
		d := str(rnd.IntN(20))
		p.Description = &d
	}
	if n := rnd.IntN(4); n > 0 {
		p.Metadata = map[string]string{}
		for i := range n {
			p.Metadata[fmt.Sprintf("k%d%s", i, str(rnd.IntN(5)))] = str(rnd.IntN(10))
		}
	}
	return p
}

// scramble writes p as JSON with its members in random order, random white
// space, random \u escapes, and absent optional members sometimes spelled
// out as null or {}.
func scramble(rnd *rand.Rand, p charges.CreateParams) string {
	ws := func() string { return []string{"", " ", "\n", "\t", "\r\n  "}[rnd.IntN(5)] }
	quote := func(s string) string {
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range s {
			switch {
			case r == '"' || r == '\\':
				b.WriteString(`\` + string(r))
			case r < 0x20 || rnd.IntN(4) == 0:
				if r > 0xFFFF {
					hi, lo := 0xD800+((r-0x10000)>>10), 0xDC00+((r-0x10000)&0x3FF)
					fmt.Fprintf(&b, `\u%04x\u%04X`, hi, lo)
				} else {
					fmt.Fprintf(&b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
		return b.String()
	}
	object := func(members []string) string {
		rnd.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		return "{" + ws() + strings.Join(members, ws()+","+ws()) + ws() + "}"
	}
	members := []string{
		`"amount"` + ws() + ":" + ws() + fmt.Sprint(p.Amount),
		quote("currency") + ":" + quote(p.Currency),
		`"payment_method":` + ws() + quote(p.PaymentMethod),
	}
	switch {
	case p.Description != nil:
		members = append(members, `"description":`+quote(*p.Description))
	case rnd.IntN(2) == 0:
		members = append(members, `"description":null`)
	}
	if p.Metadata != nil || rnd.IntN(2) == 0 {
		var md []string
		for k, v := range p.Metadata {
			md = append(md, quote(k)+ws()+":"+ws()+quote(v))
		}
		members = append(members, `"metadata":`+object(md))
	}
	return ws() + object(members) + ws()
}

// FuzzEqualFingerprintsParseToEqualParams: two bodies with equal
// fingerprints always parse to equal parameters, and the stored canonical
// body parses back to the very parameters that were fingerprinted (so the
// property holds for any pair, not only the pairs the fuzzer finds).
func FuzzEqualFingerprintsParseToEqualParams(f *testing.F) {
	f.Add(visa, `{"payment_method":"pm_card_visa","currency":"usd","amount":1000}`)
	f.Add(`{"amount":100,"AMOUNT":5000,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"amount":5000,"currency":"usd","payment_method":"pm_card_visa"}`)
	f.Add(`{"amount":1,"currency":"usd","payment_method":"pm_x","metadata":{}}`,
		`{"amount":1,"currency":"usd","payment_method":"pm_x","description":null}`)
	f.Add(`{"amount":1,"currency":"usd","payment_method":"pm_x","description":"\ud83d\ude00 <&>"}`,
		`{"amount":1,"currency":"usd","payment_method":"pm_x","description":"😀 \u003c&>"}`)
	f.Add(`{"amount":1,"currency":"eur","payment_method":"pm_x","metadata":{"a":"1","b":"\u0000"}}`,
		`{"amount":1,"currency":"eur","payment_method":"pm_x","metadata":{"b":"2","a":"1"}}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		reqA, paramsA, errA := charges.ParseCreateRequest([]byte(a))
		reqB, paramsB, errB := charges.ParseCreateRequest([]byte(b))
		for _, c := range []struct {
			err    error
			body   []byte
			params charges.CreateParams
		}{{errA, reqA.Body, paramsA}, {errB, reqB.Body, paramsB}} {
			if c.err != nil {
				continue
			}
			stored, err := charges.ParseCreateParams(c.body)
			require.NoError(t, err, string(c.body))
			require.Equal(t, c.params, stored)
		}
		if errA == nil && errB == nil && reqA.Fingerprint == reqB.Fingerprint {
			require.Equal(t, paramsA, paramsB)
		}
	})
}

// TestChargeLimitsMatchOpenAPI holds the Go limits and patterns equal to the
// numbers api/openapi.yaml publishes, so neither can drift.
func TestChargeLimitsMatchOpenAPI(t *testing.T) {
	t.Parallel()
	doc, err := api.Load()
	require.NoError(t, err)
	ref := doc.Components.Schemas["ChargeCreateRequest"]
	require.NotNil(t, ref)
	s := ref.Value

	require.NotNil(t, s.AdditionalProperties.Has)
	require.False(t, *s.AdditionalProperties.Has, "unknown members are refused")
	var names []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[charges.CreateParams]()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		names = append(names, name)
	}
	require.ElementsMatch(t, names, slices.Collect(maps.Keys(s.Properties)))
	require.ElementsMatch(t, []string{"amount", "currency", "payment_method"}, s.Required)

	amount := s.Properties["amount"].Value
	require.InDelta(t, float64(1), *amount.Min, 0)
	require.InDelta(t, float64(charges.MaxAmount), *amount.Max, 0)
	require.Equal(t, "int64", amount.Format)

	require.Equal(t, charges.CurrencyPattern, s.Properties["currency"].Value.Pattern)

	pm := s.Properties["payment_method"].Value
	require.Equal(t, charges.PaymentMethodPattern, pm.Pattern)
	require.Contains(t, charges.PaymentMethodPattern, fmt.Sprintf("{1,%d}", charges.MaxPaymentMethodChars))
	require.Equal(t, uint64(len("pm_")+charges.MaxPaymentMethodChars), *pm.MaxLength)

	desc := s.Properties["description"].Value
	require.Equal(t, uint64(charges.MaxDescription), *desc.MaxLength)
	require.True(t, desc.Nullable)

	md := s.Properties["metadata"].Value
	require.True(t, md.Nullable)
	require.Equal(t, uint64(charges.MaxMetadataKeys), *md.MaxProps)
	require.Equal(t, uint64(charges.MaxMetadataValue), *md.AdditionalProperties.Schema.Value.MaxLength)
	// OpenAPI 3.0 has no propertyNames; the key length is an extension.
	require.Equal(t, fmt.Sprint(charges.MaxMetadataKeyLength), fmt.Sprint(md.Extensions["x-key-max-length"]))
}

// TestOpenAPISchemaMatchesValidator: the published request schema accepts
// exactly what the service accepts, on bodies at every limit's edge. What
// JSON Schema cannot say is left out and documented in the schema instead:
// repeated or NUL-bearing members (jsonbody), currency codes ISO 4217 does
// not list, empty metadata keys, integers written as 1e3, and characters
// outside the BMP (kin-openapi counts UTF-16 units, JSON Schema characters).
func TestOpenAPISchemaMatchesValidator(t *testing.T) {
	t.Parallel()
	doc, err := api.Load()
	require.NoError(t, err)
	schema := doc.Components.Schemas["ChargeCreateRequest"].Value

	with := func(member string) string {
		return `{"amount":1,"currency":"usd","payment_method":"pm_x",` + member + `}`
	}
	metadata := func(n int) string {
		var kv []string
		for i := range n {
			kv = append(kv, fmt.Sprintf(`"k%d":"v"`, i))
		}
		return with(`"metadata":{` + strings.Join(kv, ",") + `}`)
	}
	bodies := []string{
		visa,
		`{"amount":0,"currency":"usd","payment_method":"pm_x"}`,
		`{"amount":-1,"currency":"usd","payment_method":"pm_x"}`,
		`{"amount":9007199254740991,"currency":"usd","payment_method":"pm_x"}`,
		`{"amount":9007199254740992,"currency":"usd","payment_method":"pm_x"}`,
		`{"amount":1.5,"currency":"usd","payment_method":"pm_x"}`,
		`{"amount":"1","currency":"usd","payment_method":"pm_x"}`,
		`{"amount":null,"currency":"usd","payment_method":"pm_x"}`,
		`{"currency":"usd","payment_method":"pm_x"}`,
		`{"amount":1,"payment_method":"pm_x"}`,
		`{"amount":1,"currency":"usd"}`,
		`{"amount":1,"currency":"USD","payment_method":"pm_x"}`,
		`{"amount":1,"currency":"us","payment_method":"pm_x"}`,
		`{"amount":1,"currency":"usdd","payment_method":"pm_x"}`,
		`{"amount":1,"currency":null,"payment_method":"pm_x"}`,
		`{"amount":1,"currency":"usd","payment_method":"pm_"}`,
		`{"amount":1,"currency":"usd","payment_method":"pm_a-b"}`,
		`{"amount":1,"currency":"usd","payment_method":"xpm_a"}`,
		`{"amount":1,"currency":"usd","payment_method":"pm_` + strings.Repeat("z", 100) + `"}`,
		`{"amount":1,"currency":"usd","payment_method":"pm_` + strings.Repeat("z", 101) + `"}`,
		with(`"Amount":1`),
		with(`"extra":1`),
		with(`"description":null`),
		with(`"description":""`),
		with(`"description":1`),
		with(`"description":"` + strings.Repeat("é", 1000) + `"`),
		with(`"description":"` + strings.Repeat("é", 1001) + `"`),
		with(`"metadata":null`),
		with(`"metadata":[]`),
		with(`"metadata":"x"`),
		with(`"metadata":{"a":1}`),
		with(`"metadata":{"a":null}`),
		with(`"metadata":{"a":""}`),
		with(`"metadata":{"a":"` + strings.Repeat("€", 500) + `"}`),
		with(`"metadata":{"a":"` + strings.Repeat("€", 501) + `"}`),
		metadata(50),
		metadata(51),
	}
	for _, body := range bodies {
		var v any
		require.NoError(t, json.Unmarshal([]byte(body), &v), body)
		schemaErr := schema.VisitJSON(v)
		_, goErr := charges.ParseCreateParams([]byte(body))
		require.Equal(t, goErr == nil, schemaErr == nil, "%s\nGo: %v\nOpenAPI: %v", body, goErr, schemaErr)
	}
}

// TestClientBodiesAreCanonical: the bodies the Go client sends (client
// TestBodiesAreSentInCanonicalForm holds the same texts) are stored as
// they came, so that the client's retries are answered by the replay fast
// path (phases.DoRaw) without being parsed.
func TestClientBodiesAreCanonical(t *testing.T) {
	for _, body := range []string{
		`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"amount":1000,"currency":"usd","description":"tea <for> two & more","metadata":{"customer":"c&1","order":"42"},"payment_method":"pm_card_visa"}`,
	} {
		req, _, err := charges.ParseCreateRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if string(req.Body) != body {
			t.Errorf("stored %s\nsent   %s", req.Body, body)
		}
	}
	refund := `{"amount":500,"charge":"ch_1"}`
	req, _, err := charges.ParseRefundRequest([]byte(refund))
	if err != nil {
		t.Fatal(err)
	}
	if string(req.Body) != refund {
		t.Errorf("stored %s\nsent   %s", req.Body, refund)
	}
}
