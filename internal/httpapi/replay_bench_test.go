//go:build unix

package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/httpapi"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// BenchmarkReplay serves replays of one finished charge through the whole
// handler (authentication cached, logging, otelhttp, the key's read on a
// real database), as the api does, in-process: ns/op is mostly waiting
// for the database; cpu-ns/op is this process's CPU time (user and
// system, getrusage) per replay, the api's share of a replay's cost, and
// user-ns/op its user part.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	pool := testdb.Pool(b, testdb.NewURL(b), time.Time{})
	keys, err := idempotency.NewStore(idempotency.Config{})
	if err != nil {
		b.Fatal(err)
	}
	mock, err := mockpsp.New(mockpsp.Faults{})
	if err != nil {
		b.Fatal(err)
	}
	pspSrv := httptest.NewServer(mock)
	b.Cleanup(pspSrv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: pspSrv.URL})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := charges.NewService(pool, keys, client, phases.Config{})
	if err != nil {
		b.Fatal(err)
	}
	tel, err := telemetry.New(ctx, "httpapi-bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	h, err := httpapi.NewHandler(httpapi.Config{Pool: pool, Charges: svc, Telemetry: tel, Logger: telemetry.NewLogger(io.Discard)})
	if err != nil {
		b.Fatal(err)
	}
	_, apiKey, err := tenants.CreateKey(ctx, pool, "acme")
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`)
	serve := func(want int) {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/charges", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "bench-replay")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated || (want == 1) != (w.Header().Get("Idempotent-Replayed") == "true") {
			b.Fatalf("status %d, replayed %q: %s", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
		}
	}
	serve(0)
	for range 100 { // warm: connections, prepared statements, caches
		serve(1)
	}
	b.ReportAllocs()
	user0, sys0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		serve(1)
	}
	b.StopTimer()
	user, sys := cpuTime()
	b.ReportMetric(float64((user-user0+sys-sys0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	// User time alone: the system time is mostly the socket calls of the
	// one read, which no handler avoids, and the noisiest part.
	b.ReportMetric(float64((user-user0).Nanoseconds())/float64(b.N), "user-ns/op")
}

// cpuTime is this process's CPU time so far, user and system.
func cpuTime() (user, sys time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
