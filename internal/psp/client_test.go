package psp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type clientBundle struct {
	mock   *Mock
	client *Client
	// keys holds the Idempotency-Key of every request that reached the
	// server, in order, whether or not the mock saw it.
	keys *keyLog
}

type keyLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) add(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, key)
	return len(l.keys)
}

func (l *keyLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.keys...)
}

// setupClient serves a mock behind a handler that logs each request and may
// answer it itself: intercept gets the request's 1-based number and returns
// false to let the mock answer. cfg's BaseURL is filled in, and its zero
// backoffs are made short so that retries cost milliseconds.
func setupClient(t *testing.T, f Faults, cfg ClientConfig, intercept func(n int, w http.ResponseWriter, r *http.Request) bool) *clientBundle {
	t.Helper()
	b := setupMock(t, f)
	keys := &keyLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := keys.add(r.Header.Get("Idempotency-Key"))
		if intercept != nil && intercept(n, w, r) {
			return
		}
		b.mock.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	cfg.BaseURL = srv.URL
	if cfg.InitialBackoff == 0 {
		cfg.InitialBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	}
	client, err := NewClient(cfg)
	require.NoError(t, err)
	return &clientBundle{mock: b.mock, client: client, keys: keys}
}

func visaRequest(key string) AuthorizeRequest {
	return AuthorizeRequest{IdempotencyKey: key, Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa", Reference: "ch_1"}
}

func repeat(key string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = key
	}
	return out
}

func TestAuthorize(t *testing.T) {
	t.Parallel()

	t.Run("Authorized", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{}, ClientConfig{}, nil)
		auth, err := b.client.Authorize(t.Context(), visaRequest("ch_1:authorize"))
		require.NoError(t, err)
		require.Equal(t, StatusAuthorized, auth.Status)
		require.Nil(t, auth.DeclineCode)

		ledger := b.mock.Authorizations()
		require.Len(t, ledger, 1)
		require.Equal(t, LedgerEntry{
			ID: auth.ID, IdempotencyKey: "ch_1:authorize", Reference: "ch_1",
			Amount: 1000, Currency: "usd", Status: StatusAuthorized, Attempts: 1,
		}, ledger[0])
	})

	t.Run("DeclinedIsAnAnswerNotAnError", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{}, ClientConfig{}, nil)
		req := visaRequest("k1")
		req.PaymentMethod = PaymentMethodDeclined
		auth, err := b.client.Authorize(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, StatusDeclined, auth.Status)
		require.NotNil(t, auth.DeclineCode)
		require.Equal(t, DeclineCodeCardDeclined, *auth.DeclineCode)
		require.Equal(t, []string{"k1"}, b.keys.all())
	})

	t.Run("KeyRequired", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{}, ClientConfig{}, nil)
		_, err := b.client.Authorize(t.Context(), visaRequest(""))
		require.Error(t, err)
		require.Empty(t, b.keys.all(), "nothing may be sent without a key")
	})

	t.Run("CustomHTTPClient", func(t *testing.T) {
		t.Parallel()
		var used bool
		httpClient := &http.Client{Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			used = true
			return http.DefaultTransport.RoundTrip(r)
		})}
		b := setupClient(t, Faults{}, ClientConfig{HTTPClient: httpClient}, nil)
		_, err := b.client.Authorize(t.Context(), visaRequest("k1"))
		require.NoError(t, err)
		require.True(t, used)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRetries503ThenSucceedsWithSameKey(t *testing.T) {
	t.Parallel()
	b := setupClient(t, Faults{}, ClientConfig{MaxAttempts: 3}, func(n int, w http.ResponseWriter, _ *http.Request) bool {
		if n <= 2 {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return true
		}
		return false
	})

	auth, err := b.client.Authorize(t.Context(), visaRequest("k1"))
	require.NoError(t, err)
	require.Equal(t, StatusAuthorized, auth.Status)
	require.Equal(t, repeat("k1", 3), b.keys.all())
	require.Len(t, b.mock.Authorizations(), 1)
}

func TestRetriesResponseCutShort(t *testing.T) {
	t.Parallel()
	b := setupClient(t, Faults{}, ClientConfig{}, func(n int, w http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			// Promise a body and break off inside it.
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"id":"auth_`))
			panic(http.ErrAbortHandler)
		}
		return false
	})

	auth, err := b.client.Authorize(t.Context(), visaRequest("k1"))
	require.NoError(t, err)
	require.Equal(t, b.mock.Authorizations()[0].ID, auth.ID)
	require.Equal(t, repeat("k1", 2), b.keys.all())
}

// TestLostResponseRetryGetsFirstAnswer is the case the project exists for:
// the PSP authorizes, the answer is lost, and the retry must get that same
// authorization back instead of making a second one.
func TestLostResponseRetryGetsFirstAnswer(t *testing.T) {
	t.Parallel()
	var mock *Mock
	b := setupClient(t, Faults{DropRate: 1}, ClientConfig{}, func(n int, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 2 {
			// Only the first answer is lost.
			if err := mock.SetFaults(Faults{}); err != nil {
				panic(err)
			}
		}
		return false
	})
	mock = b.mock

	auth, err := b.client.Authorize(t.Context(), visaRequest("k1"))
	require.NoError(t, err)

	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 1, "exactly one authorization despite the retry")
	require.Equal(t, ledger[0].ID, auth.ID, "the retry got the first answer")
	require.GreaterOrEqual(t, ledger[0].Attempts, 2)
	keys := b.keys.all()
	require.Equal(t, repeat("k1", len(keys)), keys, "every attempt carried the same key")
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setupClient(t, Faults{ErrorRate: 1}, ClientConfig{MaxAttempts: 3}, nil)

	_, err := b.client.Authorize(t.Context(), visaRequest("k1"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.NotErrorIs(t, err, ErrRejected)
	require.ErrorContains(t, err, "503")
	require.Equal(t, repeat("k1", 3), b.keys.all())
	require.Empty(t, b.mock.Authorizations())
}

func TestRetriesConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	client, err := NewClient(ClientConfig{BaseURL: "http://" + addr, MaxAttempts: 2, InitialBackoff: time.Millisecond})
	require.NoError(t, err)
	_, err = client.Authorize(t.Context(), visaRequest("k1"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorContains(t, err, "after 2 attempts")
}

func TestDoesNotRetryRejection(t *testing.T) {
	t.Parallel()

	t.Run("KeyReusedWithOtherBody", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{}, ClientConfig{}, nil)
		_, err := b.client.Authorize(t.Context(), visaRequest("k1"))
		require.NoError(t, err)

		other := visaRequest("k1")
		other.Amount = 2000
		_, err = b.client.Authorize(t.Context(), other)
		require.ErrorIs(t, err, ErrRejected)
		require.NotErrorIs(t, err, ErrUnavailable)
		require.ErrorContains(t, err, "422")
		require.ErrorContains(t, err, "idempotency_key_mismatch")
		require.Equal(t, repeat("k1", 2), b.keys.all(), "one request per call")
	})

	t.Run("InvalidRequest", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{}, ClientConfig{}, nil)
		req := visaRequest("k1")
		req.PaymentMethod = "card_visa"
		_, err := b.client.Authorize(t.Context(), req)
		require.ErrorIs(t, err, ErrRejected)
		require.ErrorContains(t, err, "400")
		require.Len(t, b.keys.all(), 1)
	})
}

func TestMalformedResponseIsPermanent(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]func(http.ResponseWriter){
		"NotJSON":       func(w http.ResponseWriter) { _, _ = w.Write([]byte("<html>ok</html>")) },
		"EmptyID":       func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"id":"","status":"authorized"}`)) },
		"UnknownStatus": func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"id":"auth_1","status":"pending"}`)) },
		"EmptyBody":     func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) },
		"Redirect": func(w http.ResponseWriter) {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(http.StatusFound)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupClient(t, Faults{}, ClientConfig{}, func(_ int, w http.ResponseWriter, _ *http.Request) bool {
				answer(w)
				return true
			})
			_, err := b.client.Authorize(t.Context(), visaRequest("k1"))
			require.ErrorIs(t, err, errMalformed)
			require.NotErrorIs(t, err, ErrUnavailable)
			require.NotErrorIs(t, err, ErrRejected)
			require.Len(t, b.keys.all(), 1, "a malformed answer is not retried")
		})
	}
}

func TestAttemptTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setupClient(t, Faults{LatencyMS: 2000}, ClientConfig{AttemptTimeout: 30 * time.Millisecond, MaxAttempts: 2}, nil)

	start := time.Now()
	_, err := b.client.Authorize(t.Context(), visaRequest("k1"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), time.Second)

	// The slow PSP did its work; only the answers were late.
	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 1)
	require.Equal(t, 2, ledger[0].Attempts)
}

func TestContextCancellation(t *testing.T) {
	t.Parallel()

	t.Run("DuringAttempt", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{LatencyMS: 2000}, ClientConfig{}, nil)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(30*time.Millisecond, cancel)

		start := time.Now()
		_, err := b.client.Authorize(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrUnavailable, "the caller left; the PSP is not known to be down")
		require.Less(t, time.Since(start), time.Second)
		require.Len(t, b.keys.all(), 1)
	})

	t.Run("DuringBackoff", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{ErrorRate: 1}, ClientConfig{InitialBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second}, nil)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(30*time.Millisecond, cancel)

		start := time.Now()
		_, err := b.client.Authorize(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "503", "the last attempt's error is kept")
		require.Less(t, time.Since(start), time.Second)
	})

	t.Run("AlreadyCanceled", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{}, ClientConfig{}, nil)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := b.client.Authorize(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, b.mock.Authorizations())
	})

	t.Run("CancelCause", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{}, ClientConfig{}, nil)
		ctx, cancel := context.WithCancelCause(t.Context())
		errShutdown := errors.New("shutting down")
		cancel(errShutdown)
		_, err := b.client.Authorize(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, errShutdown)
	})

	t.Run("DeadlineIsUnavailable", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, Faults{LatencyMS: 2000}, ClientConfig{}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		defer cancel()

		_, err := b.client.Authorize(ctx, visaRequest("k1"))
		require.ErrorIs(t, err, ErrUnavailable)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestNewClient(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c, err := NewClient(ClientConfig{BaseURL: "http://psp.test/base/"})
		require.NoError(t, err)
		require.Equal(t, "http://psp.test/base/v1/authorizations", c.endpoint)
		require.Equal(t, AttemptTimeoutDefault, c.cfg.AttemptTimeout)
		require.Equal(t, MaxAttemptsDefault, c.cfg.MaxAttempts)
		require.Equal(t, InitialBackoffDefault, c.cfg.InitialBackoff)
		require.Equal(t, MaxBackoffDefault, c.cfg.MaxBackoff)
		require.NotNil(t, c.cfg.HTTPClient)
		require.NotSame(t, http.DefaultClient, c.cfg.HTTPClient)
	})

	for name, cfg := range map[string]ClientConfig{
		"NoBaseURL":              {},
		"RelativeURL":            {BaseURL: "/psp"},
		"NoHost":                 {BaseURL: "http://"},
		"OtherScheme":            {BaseURL: "ftp://psp.test"},
		"Unparsable":             {BaseURL: "http://psp.test/%zz"},
		"NegativeTimeout":        {BaseURL: "http://psp.test", AttemptTimeout: -time.Second},
		"NegativeAttempts":       {BaseURL: "http://psp.test", MaxAttempts: -1},
		"NegativeBackoff":        {BaseURL: "http://psp.test", InitialBackoff: -time.Millisecond},
		"MaxBackoffBelowInitial": {BaseURL: "http://psp.test", InitialBackoff: 2 * time.Second, MaxBackoff: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := NewClient(cfg)
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "psp client: "), err.Error())
		})
	}
}
