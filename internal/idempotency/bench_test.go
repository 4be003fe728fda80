package idempotency_test

import (
	"testing"

	"github.com/phasepay/phasepay/internal/idempotency"
)

var benchBody = []byte(`{"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa",
  "description": "Order 1234", "metadata": {"order_id": "1234", "customer": "cus_42"}}`)

func BenchmarkCanonicalize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := idempotency.Canonicalize("POST", "/v1/charges", benchBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseKey(b *testing.B) {
	b.ReportAllocs()
	for _, h := range []string{"0f8fad5b-d9cb-469f-a165-70867728950e", `"0f8fad5b-d9cb-469f-a165-70867728950e"`} {
		b.Run(map[bool]string{true: "quoted", false: "raw"}[h[0] == '"'], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := idempotency.ParseKey(h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecide(b *testing.B) {
	b.ReportAllocs()
	fp := idempotency.Fingerprint{1}
	rec := idempotency.Record{State: idempotency.StateDone, Request: idempotency.Canonical{Fingerprint: fp}}
	for b.Loop() {
		if idempotency.Decide(rec, fp) != idempotency.Replay {
			b.Fatal("wrong decision")
		}
	}
}
