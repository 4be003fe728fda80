package psp_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

type clientBundle struct {
	mock   *mockpsp.Mock
	client *psp.Client
	// wire holds every request that reached the server, in order, whether
	// or not the mock saw it: "POST <key>" or "GET <reference>".
	wire *wireLog
}

type wireLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *wireLog) add(r *http.Request) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := r.Method + " " + r.Header.Get("Idempotency-Key")
	if r.Method == http.MethodGet {
		s = r.Method + " " + r.URL.Query().Get("reference")
	}
	l.reqs = append(l.reqs, s)
	return len(l.reqs)
}

func (l *wireLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reqs...)
}

// interceptFunc may answer a request itself: it gets the request's 1-based
// number among all requests and returns false to let the mock answer.
type interceptFunc func(n int, w http.ResponseWriter, r *http.Request) bool

// postsOnly applies answer to authorization requests (POSTs) only, letting
// the mock answer the lookups.
func postsOnly(answer func(w http.ResponseWriter)) interceptFunc {
	return func(_ int, w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost {
			return false
		}
		answer(w)
		return true
	}
}

// setupClient serves a mock configured by mcfg behind a handler that logs
// each request and may answer it itself. cfg's BaseURL is filled in, and its
// zero backoffs are made short so that retries cost milliseconds.
func setupClient(t *testing.T, mcfg mockpsp.Config, cfg psp.ClientConfig, intercept interceptFunc) *clientBundle {
	t.Helper()
	// A fixed random source: the mock's fault rolls and ids are the same on
	// every run.
	mcfg.Source = rand.NewPCG(1, 2)
	mock, err := mockpsp.NewFromConfig(mcfg)
	require.NoError(t, err)
	wire := &wireLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := wire.add(r)
		if intercept != nil && intercept(n, w, r) {
			return
		}
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	cfg.BaseURL = srv.URL
	if cfg.InitialBackoff == 0 {
		cfg.InitialBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	}
	if cfg.HTTPClient == nil {
		// A transport per test, closed with it: goleak sees no idle
		// connection left behind.
		cfg.HTTPClient = psp.NewHTTPClient(psp.NewTransport())
		t.Cleanup(cfg.HTTPClient.CloseIdleConnections)
	}
	client, err := psp.NewClient(cfg)
	require.NoError(t, err)
	return &clientBundle{mock: mock, client: client, wire: wire}
}

// visaRequest is a charge's first attempt: nothing sent before.
func visaRequest(key string) psp.AuthorizeRequest {
	return psp.AuthorizeRequest{IdempotencyKey: key, FirstSend: true, Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa", Reference: "ch_1"}
}

// resumed is req as a later attempt sends it: something may have been sent.
func resumed(req psp.AuthorizeRequest) psp.AuthorizeRequest {
	req.FirstSend = false
	return req
}

func TestAuthorize(t *testing.T) {
	t.Parallel()

	t.Run("Authorized", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("ch_1:authorize"))
		require.NoError(t, err)
		require.Equal(t, psp.ClassSuccess, out.Class)
		require.Equal(t, psp.StatusAuthorized, out.Authorization.Status)
		require.Nil(t, out.Authorization.DeclineCode)
		require.Equal(t, "ch_1", out.Authorization.Reference)
		require.Equal(t, 1, out.Sent)
		require.Zero(t, out.Lookups, "a first send needs no lookup")
		require.False(t, out.FoundByLookup)

		ledger := b.mock.Authorizations()
		require.Len(t, ledger, 1)
		require.Equal(t, mockpsp.LedgerEntry{
			ID: out.Authorization.ID, IdempotencyKey: "ch_1:authorize", Reference: "ch_1",
			Amount: 1000, Currency: "usd", Status: psp.StatusAuthorized, Attempts: 1,
		}, ledger[0])
	})

	t.Run("DeclinedIsAFinalAnswerNotAnError", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		req := visaRequest("k1")
		req.PaymentMethod = mockpsp.PaymentMethodDeclined
		out, err := b.client.AuthorizeOutcome(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, psp.ClassFinalFailure, out.Class)
		require.True(t, out.Declined())
		require.NotNil(t, out.Authorization.DeclineCode)
		require.Equal(t, psp.DeclineCodeCardDeclined, *out.Authorization.DeclineCode)
		require.Equal(t, []string{"POST k1"}, b.wire.all())
	})

	t.Run("ResumeLooksUpFirst", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		out, err := b.client.AuthorizeOutcome(t.Context(), resumed(visaRequest("k1")))
		require.NoError(t, err)
		require.Equal(t, psp.ClassSuccess, out.Class)
		require.Equal(t, []string{"GET ch_1", "POST k1"}, b.wire.all())
		require.Equal(t, 1, out.Lookups)
	})

	t.Run("CompatibleAuthorize", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		auth, err := b.client.Authorize(t.Context(), visaRequest("k1"))
		require.NoError(t, err)
		require.Equal(t, psp.StatusAuthorized, auth.Status)

		req := visaRequest("k2")
		req.PaymentMethod = "card_visa"
		_, err = b.client.Authorize(t.Context(), req)
		require.ErrorIs(t, err, psp.ErrRejected)
	})

	t.Run("KeyAndReferenceRequired", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		_, err := b.client.AuthorizeOutcome(t.Context(), visaRequest(""))
		require.Error(t, err)
		_, err = b.client.AuthorizeOnce(t.Context(), visaRequest(""))
		require.Error(t, err)
		noRef := visaRequest("k1")
		noRef.Reference = ""
		_, err = b.client.AuthorizeOutcome(t.Context(), noRef)
		require.Error(t, err)
		_, err = b.client.Lookup(t.Context(), "")
		require.Error(t, err)
		require.Empty(t, b.wire.all(), "nothing may be sent without a key and a reference")
	})

	t.Run("CustomHTTPClient", func(t *testing.T) {
		t.Parallel()
		var used bool
		tr := psp.NewTransport()
		t.Cleanup(tr.CloseIdleConnections)
		httpClient := psp.NewHTTPClient(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			used = true
			return tr.RoundTrip(r)
		}))
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{HTTPClient: httpClient}, nil)
		_, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.NoError(t, err)
		require.True(t, used)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestLostAnswerIsResolvedByLookup: the PSP authorizes and the answer is
// lost. The client asks the PSP by reference instead of sending again, and
// records what it finds as if it had been answered.
func TestLostAnswerIsResolvedByLookup(t *testing.T) {
	t.Parallel()
	b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{DropRate: 1}}, psp.ClientConfig{}, nil)

	out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.True(t, out.FoundByLookup)
	require.Equal(t, 1, out.Sent, "found by lookup: never sent again")
	require.Equal(t, 1, out.Lookups)

	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 1)
	require.Equal(t, ledger[0].ID, out.Authorization.ID)
	reqs := b.mock.Requests()
	require.Len(t, reqs, 2)
	require.Equal(t, [2]int{0, 200}, [2]int{reqs[0].Status, reqs[1].Status}, "the answer was dropped, the lookup answered")
	require.Equal(t, http.MethodGet, reqs[1].Method)
	require.Equal(t, "ch_1", reqs[1].Reference)

	t.Run("Decline", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{DropRate: 1}}, psp.ClientConfig{}, nil)
		req := visaRequest("k1")
		req.PaymentMethod = mockpsp.PaymentMethodDeclined
		out, err := b.client.AuthorizeOutcome(t.Context(), req)
		require.NoError(t, err)
		require.True(t, out.Declined())
		require.True(t, out.FoundByLookup)
		require.Equal(t, b.mock.Authorizations()[0].ID, out.Authorization.ID)
	})
}

// TestLookupBeforeResend: after an unknown outcome the client sends the
// authorization again only after a lookup that found nothing; when the
// lookup fails, it sends nothing more.
func TestLookupBeforeResend(t *testing.T) {
	t.Parallel()

	t.Run("NotFoundThenResent", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, func(n int, w http.ResponseWriter, r *http.Request) bool {
			if n == 1 {
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return true
			}
			return false
		})
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.NoError(t, err)
		require.Equal(t, psp.ClassSuccess, out.Class)
		require.False(t, out.FoundByLookup)
		require.Equal(t, []string{"POST k1", "GET ch_1", "POST k1"}, b.wire.all())
		require.Equal(t, 2, out.Sent)
		require.Equal(t, 1, out.Lookups)
		require.Len(t, b.mock.Authorizations(), 1)
	})

	t.Run("LookupFailsNothingMoreIsSent", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{DropRate: 1, LookupErrorRate: 1}}, psp.ClientConfig{}, nil)
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.ErrorIs(t, err, psp.ErrUnavailable)
		require.ErrorContains(t, err, "lookup")
		require.Equal(t, psp.ClassUnknown, out.Class)
		require.Equal(t, []string{"POST k1", "GET ch_1"}, b.wire.all())
		require.Equal(t, 1, b.mock.Injected().LookupErrors)
	})

	t.Run("ResumeWhoseLookupFailsSendsNothing", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{LookupErrorRate: 1}}, psp.ClientConfig{}, nil)
		out, err := b.client.AuthorizeOutcome(t.Context(), resumed(visaRequest("k1")))
		require.ErrorIs(t, err, psp.ErrUnavailable)
		require.Equal(t, psp.ClassUnknown, out.Class)
		require.Zero(t, out.Sent)
		require.Equal(t, []string{"GET ch_1"}, b.wire.all())
	})

	t.Run("EveryUnknownIsLookedUp", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{MaxAttempts: 3}, postsOnly(func(w http.ResponseWriter) {
			http.Error(w, "overloaded", http.StatusBadGateway)
		}))
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.ErrorIs(t, err, psp.ErrUnavailable)
		require.ErrorContains(t, err, "502")
		require.Equal(t, psp.ClassUnknown, out.Class)
		require.Equal(t, 502, out.StatusCode)
		require.Equal(t, 3, out.Sent)
		require.Equal(t, 3, out.Lookups, "the last send is looked up too: no 503 when a lookup could settle it")
		require.Equal(t, []string{"POST k1", "GET ch_1", "POST k1", "GET ch_1", "POST k1", "GET ch_1"}, b.wire.all())
	})

	// The property over many calls under every fault at once, read from
	// the mock's own request log as a black-box test would.
	t.Run("UnderFaults", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{ErrorRate: 0.3, DropRate: 0.3, LookupErrorRate: 0.3}}, psp.ClientConfig{}, nil)
		for i := range 40 {
			req := visaRequest(fmt.Sprintf("ch_%d:authorize", i))
			req.Reference = fmt.Sprintf("ch_%d", i)
			req.FirstSend = i%2 == 0
			_, _ = b.client.AuthorizeOutcome(t.Context(), req)
		}
		requireLookupBeforeEveryResend(t, b.mock.Requests())
		require.Positive(t, b.mock.Injected().Drops)
	})
}

// requireLookupBeforeEveryResend checks, per reference, that an
// authorization is never sent again after a send without a lookup that
// answered between them.
func requireLookupBeforeEveryResend(t *testing.T, reqs []mockpsp.RequestEntry) {
	t.Helper()
	sentSinceLookup := map[string]bool{}
	var posts, lookups int
	for i, r := range reqs {
		switch {
		case r.Method == http.MethodPost:
			posts++
			require.False(t, sentSinceLookup[r.Reference], "request %d: %s sent again without a lookup: %+v", i, r.Reference, reqs)
			sentSinceLookup[r.Reference] = true
		case r.Method == http.MethodGet && r.Status == http.StatusOK:
			lookups++
			sentSinceLookup[r.Reference] = false
		}
	}
	require.Positive(t, posts)
	require.Positive(t, lookups)
}

func TestBusyIsRetriedUnderSameKey(t *testing.T) {
	t.Parallel()

	t.Run("WithoutLookup", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, func(n int, w http.ResponseWriter, _ *http.Request) bool {
			switch n {
			case 1:
				http.Error(w, "slow down", http.StatusTooManyRequests)
			case 2:
				http.Error(w, "in progress", http.StatusConflict)
			default:
				return false
			}
			return true
		})
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.NoError(t, err)
		require.Equal(t, psp.ClassSuccess, out.Class)
		require.Equal(t, []string{"POST k1", "POST k1", "POST k1"}, b.wire.all(), "nothing was done: no lookup needed")
	})

	t.Run("HonoursShortRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Second}, func(n int, w http.ResponseWriter, _ *http.Request) bool {
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return true
			}
			return false
		})
		start := time.Now()
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.NoError(t, err)
		require.Equal(t, psp.ClassSuccess, out.Class)
		require.GreaterOrEqual(t, time.Since(start), time.Second)
	})

	t.Run("LongRetryAfterIsTheCallersToSchedule", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, postsOnly(func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "30")
			http.Error(w, `{"error":{"code":"rate_limited","message":"slow down"}}`, http.StatusTooManyRequests)
		}))
		start := time.Now()
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.ErrorIs(t, err, psp.ErrBusy)
		require.NotErrorIs(t, err, psp.ErrUnavailable)
		require.Equal(t, psp.ClassBusy, out.Class)
		require.Equal(t, 30*time.Second, out.RetryAfter)
		require.Equal(t, "rate_limited: slow down", out.Reason)
		require.Equal(t, 1, out.Sent)
		require.Less(t, time.Since(start), time.Second)
	})

	t.Run("BudgetSpent", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{MaxAttempts: 2}, postsOnly(func(w http.ResponseWriter) {
			http.Error(w, "busy", http.StatusConflict)
		}))
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.ErrorIs(t, err, psp.ErrBusy)
		require.Equal(t, psp.ClassBusy, out.Class)
		require.Zero(t, out.RetryAfter)
		require.Equal(t, []string{"POST k1", "POST k1"}, b.wire.all())
	})
}

// TestFinalFailureIsNeverResent: a request the PSP refused (nothing done)
// is a final answer with the PSP's reason, sent once.
func TestFinalFailureIsNeverResent(t *testing.T) {
	t.Parallel()

	t.Run("InvalidRequest", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		req := visaRequest("k1")
		req.PaymentMethod = "card_visa"
		out, err := b.client.AuthorizeOutcome(t.Context(), req)
		require.ErrorIs(t, err, psp.ErrRejected)
		require.NotErrorIs(t, err, psp.ErrUnavailable)
		require.Equal(t, psp.ClassFinalFailure, out.Class)
		require.False(t, out.Declined())
		require.Equal(t, 400, out.StatusCode)
		require.Contains(t, out.Reason, "invalid_request: payment_method")
		require.Len(t, b.wire.all(), 1)
	})

	t.Run("RejectRate", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{RejectRate: 1}}, psp.ClientConfig{}, nil)
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.ErrorIs(t, err, psp.ErrRejected)
		require.Equal(t, psp.ClassFinalFailure, out.Class)
		require.Equal(t, "rejected: injected fault (reject_rate)", out.Reason)
		require.Empty(t, b.mock.Authorizations(), "a refusal does nothing")
		require.Equal(t, []string{"POST k1"}, b.wire.all())
	})

	t.Run("KeyReusedWithOtherBody", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		_, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.NoError(t, err)
		other := visaRequest("k1")
		other.Amount = 2000
		out, err := b.client.AuthorizeOutcome(t.Context(), other)
		require.ErrorIs(t, err, psp.ErrRejected)
		require.Equal(t, 422, out.StatusCode)
		require.Contains(t, out.Reason, "idempotency_key_mismatch")
		require.Equal(t, []string{"POST k1", "POST k1"}, b.wire.all(), "one request per call")
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, postsOnly(func(w http.ResponseWriter) {
			http.Error(w, "no such payment method", http.StatusNotFound)
		}))
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.ErrorIs(t, err, psp.ErrRejected)
		// A body without the PSP's reason field is never the reason (a
		// tenant reads it in the 402): the public words stand in, and the
		// body is in the raw cause, for operators.
		require.Equal(t, "PSP refused the request (404)", out.Reason)
		require.ErrorContains(t, err, "no such payment method")
	})
}

func TestAuthorizeOnceSendsOnce(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]func(http.ResponseWriter){
		"ServerError": func(w http.ResponseWriter) { http.Error(w, "boom", http.StatusInternalServerError) },
		"NotJSON":     func(w http.ResponseWriter) { _, _ = w.Write([]byte("<html>ok</html>")) },
		"EmptyID":     func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"id":"","status":"authorized"}`)) },
		"Pending":     func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"id":"auth_1","status":"pending"}`)) },
		"OtherCharge": func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(`{"id":"auth_1","status":"authorized","reference":"ch_2"}`))
		},
		"EmptyBody": func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) },
		"Redirect": func(w http.ResponseWriter) {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(http.StatusFound)
		},
		"CutShort": func(w http.ResponseWriter) {
			// Promise a body and break off inside it.
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"id":"auth_`))
			panic(http.ErrAbortHandler)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, postsOnly(answer))
			out, err := b.client.AuthorizeOnce(t.Context(), visaRequest("k1"))
			require.ErrorIs(t, err, psp.ErrUnavailable, "the PSP may have acted")
			require.NotErrorIs(t, err, psp.ErrRejected)
			require.Equal(t, psp.ClassUnknown, out.Class)
			require.Zero(t, out.Authorization, "no half-read authorization")
			require.Equal(t, []string{"POST k1"}, b.wire.all())
		})
	}

	t.Run("MalformedIsMarked", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, postsOnly(func(w http.ResponseWriter) { _, _ = w.Write([]byte("{}")) }))
		_, err := b.client.AuthorizeOnce(t.Context(), visaRequest("k1"))
		require.ErrorIs(t, err, psp.ErrMalformed)
	})
}

func TestLookup(t *testing.T) {
	t.Parallel()

	t.Run("ListsEveryAuthorizationForTheReference", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		list, err := b.client.Lookup(t.Context(), "ch_1")
		require.NoError(t, err)
		require.Empty(t, list)
		require.NotNil(t, list)

		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.NoError(t, err)
		other := visaRequest("k2")
		other.Reference = "ch_2"
		_, err = b.client.AuthorizeOutcome(t.Context(), other)
		require.NoError(t, err)

		list, err = b.client.Lookup(t.Context(), "ch_1")
		require.NoError(t, err)
		require.Equal(t, []psp.Authorization{out.Authorization}, list)
	})

	t.Run("PrefersAnAuthorizedEntry", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, func(_ int, w http.ResponseWriter, r *http.Request) bool {
			switch r.Method {
			case http.MethodGet:
				_, _ = w.Write([]byte(`{"data":[{"id":"auth_1","status":"declined","decline_code":"card_declined","reference":"ch_1"},{"id":"auth_2","status":"authorized","reference":"ch_1"}]}`))
			default:
				http.Error(w, "boom", http.StatusInternalServerError)
			}
			return true
		})
		out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
		require.NoError(t, err)
		require.Equal(t, "auth_2", out.Authorization.ID)
		require.Equal(t, psp.ClassSuccess, out.Class)
	})

	for name, body := range map[string]string{
		"NotJSON":     `<html>`,
		"NoData":      `{}`,
		"BadEntry":    `{"data":[{"id":"","status":"authorized"}]}`,
		"OtherCharge": `{"data":[{"id":"auth_1","status":"authorized","reference":"ch_9"}]}`,
	} {
		t.Run("Malformed"+name, func(t *testing.T) {
			t.Parallel()
			b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, func(_ int, w http.ResponseWriter, _ *http.Request) bool {
				_, _ = w.Write([]byte(body))
				return true
			})
			_, err := b.client.Lookup(t.Context(), "ch_1")
			require.ErrorIs(t, err, psp.ErrUnavailable)
			require.ErrorIs(t, err, psp.ErrMalformed)
		})
	}

	t.Run("ErrorRateFailsLookups", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{ErrorRate: 1}}, psp.ClientConfig{}, nil)
		_, err := b.client.Lookup(t.Context(), "ch_1")
		require.ErrorIs(t, err, psp.ErrUnavailable)
		require.ErrorContains(t, err, "503")
	})
}

// TestLookupFindsAuthorizationAfterKeyForgotten: the PSP authorized, the
// answer was lost and so was the lookup; a day later the PSP has forgotten
// the key. Resending under it would authorize a second time; the lookup
// that a resume starts with finds the first authorization instead.
func TestLookupFindsAuthorizationAfterKeyForgotten(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setupClient(t, mockpsp.Config{KeyTTL: time.Hour, Now: clock.now, Faults: mockpsp.Faults{DropRate: 1, LookupErrorRate: 1}}, psp.ClientConfig{}, nil)

	out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.Equal(t, psp.ClassUnknown, out.Class)
	require.Len(t, b.mock.Authorizations(), 1, "authorized, answer lost, lookup failed")

	clock.advance(2 * time.Hour)
	require.NoError(t, b.mock.SetFaults(mockpsp.Faults{}))
	out, err = b.client.AuthorizeOutcome(t.Context(), resumed(visaRequest("k1")))
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.True(t, out.FoundByLookup)
	require.Zero(t, out.Sent)

	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 1, "never authorized twice")
	require.Equal(t, ledger[0].ID, out.Authorization.ID)
	require.Equal(t, []string{"POST k1", "GET ch_1", "GET ch_1"}, b.wire.all())
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestConnectionRefusedIsUnknown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	client, err := psp.NewClient(psp.ClientConfig{BaseURL: "http://" + addr, MaxAttempts: 2, InitialBackoff: time.Millisecond})
	require.NoError(t, err)
	out, err := client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.ErrorContains(t, err, "lookup")
	require.Equal(t, psp.ClassUnknown, out.Class)
	require.Equal(t, 1, out.Sent, "the lookup failed too: nothing is sent again")
}

func TestAttemptTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{LatencyMS: 5000}}, psp.ClientConfig{AttemptTimeout: 200 * time.Millisecond}, nil)

	start := time.Now()
	out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, psp.ClassUnknown, out.Class)
	require.Equal(t, 1, out.Lookups, "the lookup timed out too: nothing more is sent")
	require.Less(t, time.Since(start), 3*time.Second)

	// The slow PSP did its work; only the answers were late.
	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 1)
	require.Equal(t, 1, ledger[0].Attempts)
}

func TestContextCancellation(t *testing.T) {
	t.Parallel()

	t.Run("DuringSend", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		// The caller leaves once the request has reached the PSP.
		b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{LatencyMS: 2000}}, psp.ClientConfig{}, func(_ int, _ http.ResponseWriter, _ *http.Request) bool {
			cancel()
			return false
		})

		start := time.Now()
		out, err := b.client.AuthorizeOutcome(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, psp.ErrUnavailable, "the caller left; the PSP is not known to be down")
		require.Equal(t, psp.ClassUnknown, out.Class, "the PSP may have acted all the same")
		require.Less(t, time.Since(start), time.Second)
		require.Equal(t, []string{"POST k1"}, b.wire.all(), "no lookup on a dead context")
	})

	t.Run("DuringPause", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{InitialBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second}, postsOnly(func(w http.ResponseWriter) {
			http.Error(w, "busy", http.StatusConflict)
			// The caller leaves while the client pauses after this answer.
			time.AfterFunc(100*time.Millisecond, cancel)
		}))

		start := time.Now()
		out, err := b.client.AuthorizeOutcome(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, psp.ErrBusy)
		require.ErrorContains(t, err, "409", "the last send's error is kept")
		require.Equal(t, psp.ClassBusy, out.Class)
		require.Less(t, time.Since(start), time.Second)
	})

	t.Run("DeadlineDuringPauseKeepsTheClass", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{InitialBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second}, postsOnly(func(w http.ResponseWriter) {
			http.Error(w, "busy", http.StatusConflict)
		}))
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		out, err := b.client.AuthorizeOutcome(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, psp.ErrBusy)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, psp.ClassBusy, out.Class)
	})

	t.Run("AlreadyCanceled", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := b.client.AuthorizeOutcome(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, b.mock.Authorizations())
	})

	t.Run("CancelCause", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		ctx, cancel := context.WithCancelCause(t.Context())
		errShutdown := errors.New("shutting down")
		cancel(errShutdown)
		_, err := b.client.AuthorizeOutcome(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, errShutdown)
	})

	t.Run("DeadlineIsUnknown", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{Faults: mockpsp.Faults{LatencyMS: 2000}}, psp.ClientConfig{}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		defer cancel()

		out, err := b.client.AuthorizeOutcome(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, psp.ErrUnavailable)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, psp.ClassUnknown, out.Class)
	})
}
