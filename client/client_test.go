package client

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c, err := New(Config{BaseURL: "http://127.0.0.1:8080", APIKey: "sk"})
		require.NoError(t, err)
		t.Cleanup(c.CloseIdleConnections)
		require.Equal(t, MaxElapsedDefault, c.cfg.MaxElapsed)
		require.Equal(t, InitialBackoffDefault, c.cfg.InitialBackoff)
		require.Equal(t, MaxBackoffDefault, c.cfg.MaxBackoff)
		require.Equal(t, AttemptTimeoutDefault, c.http.Timeout)
		require.IsType(t, noJournal{}, c.journal)
	})

	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"NoBaseURL", Config{APIKey: "sk"}, "BaseURL is required"},
		{"NoScheme", Config{BaseURL: "127.0.0.1:8080", APIKey: "sk"}, "BaseURL"},
		{"WrongScheme", Config{BaseURL: "ftp://x", APIKey: "sk"}, "want http(s)://host"},
		{"NoHost", Config{BaseURL: "http://", APIKey: "sk"}, "want http(s)://host"},
		{"NoAPIKey", Config{BaseURL: "http://x"}, "APIKey is required"},
		{"NegativeElapsed", Config{BaseURL: "http://x", APIKey: "sk", MaxElapsed: -1}, "must not be negative"},
		{"MaxBelowInitial", Config{BaseURL: "http://x", APIKey: "sk", InitialBackoff: time.Second, MaxBackoff: time.Millisecond}, "below InitialBackoff"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestRetriesWithSameKey: 409, 503, 429 and 500 are retried, every attempt
// carries the one key, and that key was journaled before the first request
// arrived.
func TestRetriesWithSameKey(t *testing.T) {
	t.Parallel()
	journal := NewMemoryJournal()
	desc := "order 42"
	params := ChargeParams{Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa", Description: &desc, Metadata: map[string]string{"order": "42"}}
	final := chargeBody("ch_1", params)
	api := newFakeAPI(t, journal, func(w http.ResponseWriter, r *http.Request, n int) {
		switch n {
		case 1:
			writeProblem(w, http.StatusConflict, CodeIdempotencyKeyInUse, "in progress", 0, nil)
		case 2:
			writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 0, nil)
		case 3:
			writeProblem(w, http.StatusTooManyRequests, "rate_limited", "slow down", 0, nil)
		case 4:
			writeProblem(w, http.StatusInternalServerError, "internal", "oops", 0, nil)
		default:
			writeCharge(w, http.StatusCreated, final, false)
		}
	})
	var (
		mu       sync.Mutex
		statuses []int
	)
	c := newTestClient(t, api.srv.URL, func(cfg *Config) {
		cfg.Journal = journal
		cfg.OnAttempt = func(_ Intent, attempt int, status int, _ error) {
			mu.Lock()
			defer mu.Unlock()
			statuses = append(statuses, status)
			require.Equal(t, len(statuses), attempt)
		}
	})

	ch, err := c.Charge(context.Background(), params)
	require.NoError(t, err)
	require.Equal(t, "ch_1", ch.ID)
	require.Equal(t, StatusAuthorized, ch.Status)
	require.Equal(t, "order 42", *ch.Description)
	require.Equal(t, map[string]string{"order": "42"}, ch.Metadata)
	require.Equal(t, final, ch.RawBody)
	require.False(t, ch.Replayed)

	reqs := api.requests()
	require.Len(t, reqs, 5)
	for _, r := range reqs {
		require.Equal(t, reqs[0].Key, r.Key, "every attempt must carry the intent's one key")
		require.NotEmpty(t, r.Key)
		require.True(t, r.Journaled, "the key must be journaled before any request carries it")
		require.Equal(t, "Bearer "+testAPIKey, r.Auth)
		require.Equal(t, "/v1/charges", r.Path)
		require.Equal(t, reqs[0].Body, r.Body)
	}
	var sent map[string]any
	require.NoError(t, json.Unmarshal(reqs[0].Body, &sent))
	require.Equal(t, map[string]any{"amount": 1000.0, "currency": "usd", "payment_method": "pm_card_visa",
		"description": "order 42", "metadata": map[string]any{"order": "42"}}, sent)
	require.Equal(t, []int{409, 503, 429, 500, 201}, statuses)

	left, err := journal.List()
	require.NoError(t, err)
	require.Empty(t, left, "a settled intent leaves the journal")
}

// TestKeyNotGeneratedInsideRetryLoop: the N attempts of one Charge carry
// one key; two Charge calls carry two keys.
func TestKeyNotGeneratedInsideRetryLoop(t *testing.T) {
	t.Parallel()
	const failures = 3
	var (
		mu       sync.Mutex
		perKey   = map[string]int{}
		attempts = map[string][]int{}
	)
	api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, _ int) {
		mu.Lock()
		perKey[r.Header.Get("Idempotency-Key")]++
		n := perKey[r.Header.Get("Idempotency-Key")]
		mu.Unlock()
		if n <= failures {
			writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 0, nil)
			return
		}
		writeCharge(w, http.StatusCreated, chargeBody("ch_"+r.Header.Get("Idempotency-Key"), visa), false)
	})
	c := newTestClient(t, api.srv.URL, func(cfg *Config) {
		cfg.OnAttempt = func(in Intent, attempt int, _ int, _ error) {
			mu.Lock()
			defer mu.Unlock()
			attempts[in.Key] = append(attempts[in.Key], attempt)
		}
	})

	ch1, err := c.Charge(context.Background(), visa)
	require.NoError(t, err)
	ch2, err := c.Charge(context.Background(), visa)
	require.NoError(t, err)

	keys := api.keys()
	require.Len(t, keys, 2*(failures+1))
	first, second := keys[:failures+1], keys[failures+1:]
	for _, k := range first {
		require.Equal(t, first[0], k, "one Charge, one key, however many attempts")
	}
	for _, k := range second {
		require.Equal(t, second[0], k, "one Charge, one key, however many attempts")
	}
	require.NotEqual(t, first[0], second[0], "two Charge calls are two intents with two keys")
	require.Equal(t, "ch_"+first[0], ch1.ID)
	require.Equal(t, "ch_"+second[0], ch2.ID)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string][]int{first[0]: {1, 2, 3, 4}, second[0]: {1, 2, 3, 4}}, attempts)
}

func TestHonoursRetryAfter(t *testing.T) {
	t.Parallel()

	t.Run("RealTime", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				writeProblem(w, http.StatusConflict, CodeIdempotencyKeyInUse, "in progress", 1, nil)
				return
			}
			writeCharge(w, http.StatusCreated, chargeBody("ch_1", visa), false)
		})
		c := newTestClient(t, api.srv.URL, nil) // jitter alone would wait ≤ 1ms
		_, err := c.Charge(context.Background(), visa)
		require.NoError(t, err)
		reqs := api.requests()
		require.Len(t, reqs, 2)
		require.GreaterOrEqual(t, reqs[1].At.Sub(reqs[0].At), time.Second)
	})

	t.Run("LowerBoundOfEverySleep", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, n int) {
			switch n {
			case 1, 2:
				writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 3, nil)
			case 3:
				writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 0, nil)
			default:
				writeCharge(w, http.StatusCreated, chargeBody("ch_1", visa), false)
			}
		})
		c := newTestClient(t, api.srv.URL, func(cfg *Config) {
			cfg.MaxElapsed = time.Minute
			cfg.InitialBackoff, cfg.MaxBackoff = 100*time.Millisecond, time.Second
		})
		var waits []time.Duration
		c.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
		_, err := c.Charge(context.Background(), visa)
		require.NoError(t, err)
		require.Len(t, waits, 3)
		require.GreaterOrEqual(t, waits[0], 3*time.Second)
		require.GreaterOrEqual(t, waits[1], 3*time.Second)
		require.LessOrEqual(t, waits[2], 400*time.Millisecond, "without Retry-After, the jitter window of the third retry")
	})

	t.Run("BeyondTheDeadlineGivesUpAtOnce", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, n int) {
			writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 30, nil)
		})
		c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.MaxElapsed = 2 * time.Second })
		start := time.Now()
		_, err := c.Charge(context.Background(), visa)
		require.ErrorIs(t, err, ErrGaveUp)
		require.Less(t, time.Since(start), time.Second, "waiting 30s for a 2s budget is pointless")
		require.Len(t, api.requests(), 1)
	})
}

func TestFinalErrorsAreTyped(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		code   string
		extra  map[string]any
		is     error
	}{
		{"Declined", http.StatusPaymentRequired, CodeCardDeclined, map[string]any{"charge": "ch_declined"}, ErrDeclined},
		{"PaymentFailed", http.StatusPaymentRequired, CodePaymentFailed, map[string]any{"charge": "ch_failed"}, ErrPaymentFailed},
		{"UnsupportedMediaType", http.StatusUnsupportedMediaType, "unsupported_media_type", nil, ErrInvalidRequest},
		{"MethodNotAllowed", http.StatusMethodNotAllowed, "method_not_allowed", nil, ErrInvalidRequest},
		{"Mismatch", http.StatusUnprocessableEntity, CodeIdempotencyKeyMismatch, nil, ErrMismatch},
		{"Invalid", http.StatusBadRequest, "invalid_request", map[string]any{"errors": []FieldError{{Field: "amount", Message: "must be >= 1"}}}, ErrInvalidRequest},
		{"KeyInvalid", http.StatusBadRequest, "idempotency_key_invalid", nil, ErrInvalidRequest},
		{"TooLarge", http.StatusRequestEntityTooLarge, "payload_too_large", nil, ErrInvalidRequest},
		{"Unauthorized", http.StatusUnauthorized, "unauthorized", nil, ErrUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			journal := NewMemoryJournal()
			api := newFakeAPI(t, journal, func(w http.ResponseWriter, r *http.Request, _ int) {
				writeProblem(w, tt.status, tt.code, "detail of "+tt.code, 0, tt.extra)
			})
			var attempts int
			c := newTestClient(t, api.srv.URL, func(cfg *Config) {
				cfg.Journal = journal
				cfg.OnAttempt = func(Intent, int, int, error) { attempts++ }
			})

			ch, err := c.Charge(context.Background(), visa)
			require.Nil(t, ch)
			require.ErrorIs(t, err, tt.is)
			require.NotErrorIs(t, err, ErrGaveUp)
			for _, other := range []error{ErrDeclined, ErrPaymentFailed, ErrMismatch, ErrInvalidRequest, ErrUnauthorized, ErrNotFound, ErrUnresolved, ErrUnavailable} {
				if other != tt.is {
					require.NotErrorIs(t, err, other)
				}
			}
			var apiErr *Error
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, tt.status, apiErr.Status)
			require.Equal(t, tt.status, apiErr.Problem.Status)
			require.Equal(t, tt.code, apiErr.Problem.Code)
			require.Equal(t, "detail of "+tt.code, apiErr.Problem.Detail)
			require.NotEmpty(t, apiErr.RawBody)
			if tt.is == ErrDeclined {
				require.Equal(t, "ch_declined", apiErr.Problem.Charge)
				require.Contains(t, err.Error(), "ch_declined")
			}
			if tt.code == "invalid_request" {
				require.Equal(t, []FieldError{{Field: "amount", Message: "must be >= 1"}}, apiErr.Problem.Errors)
			}
			require.Equal(t, 1, attempts, "a final answer is not retried")
			require.Len(t, api.requests(), 1)
			left, err := journal.List()
			require.NoError(t, err)
			require.Empty(t, left, "a final answer settles the intent")
		})
	}
}

func TestGivesUpAtMaxElapsed(t *testing.T) {
	t.Parallel()

	t.Run("Unavailable", func(t *testing.T) {
		t.Parallel()
		journal := NewMemoryJournal()
		api := newFakeAPI(t, journal, func(w http.ResponseWriter, r *http.Request, _ int) {
			writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 0, nil)
		})
		const budget = 300 * time.Millisecond
		c := newTestClient(t, api.srv.URL, func(cfg *Config) {
			cfg.Journal = journal
			cfg.MaxElapsed = budget
			cfg.InitialBackoff, cfg.MaxBackoff = 5*time.Millisecond, 40*time.Millisecond
		})
		start := time.Now()
		_, err := c.Charge(context.Background(), visa)
		elapsed := time.Since(start)
		require.ErrorIs(t, err, ErrGaveUp)
		require.ErrorIs(t, err, ErrUnavailable, "the last answer is wrapped too")
		var apiErr *Error
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, http.StatusServiceUnavailable, apiErr.Status)
		require.Less(t, elapsed, budget+500*time.Millisecond)
		require.Greater(t, len(api.requests()), 2)

		left, err := journal.List()
		require.NoError(t, err)
		require.Len(t, left, 1, "an intent without a final answer stays for ResumePending")
		require.Equal(t, api.requests()[0].Key, left[0].Key)
	})

	t.Run("HangingAttemptIsCutAtTheDeadline", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, _ int) {
			<-r.Context().Done() // answers never; the client hangs up
		})
		c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.MaxElapsed = 200 * time.Millisecond })
		start := time.Now()
		_, err := c.Charge(context.Background(), visa)
		require.ErrorIs(t, err, ErrGaveUp)
		require.Less(t, time.Since(start), 2*time.Second)
	})
}

func TestRetriesNetworkErrors(t *testing.T) {
	t.Parallel()

	t.Run("ConnectionClosedMidRequest", func(t *testing.T) {
		t.Parallel()
		var statuses []int
		api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				// The server took the request and died before answering: the
				// lost-response case the key exists for.
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					_ = conn.Close()
				}
				return
			}
			writeCharge(w, http.StatusCreated, chargeBody("ch_1", visa), true)
		})
		c := newTestClient(t, api.srv.URL, func(cfg *Config) {
			cfg.OnAttempt = func(_ Intent, _ int, status int, _ error) { statuses = append(statuses, status) }
		})
		ch, err := c.Charge(context.Background(), visa)
		require.NoError(t, err)
		require.True(t, ch.Replayed)
		keys := api.keys()
		require.GreaterOrEqual(t, len(keys), 2)
		for _, k := range keys {
			require.Equal(t, keys[0], k)
		}
		require.Equal(t, 0, statuses[0], "no answer: status 0")
		require.Equal(t, http.StatusCreated, statuses[len(statuses)-1])
	})

	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())

		var attempts int
		c := newTestClient(t, "http://"+addr, func(cfg *Config) {
			cfg.MaxElapsed = 200 * time.Millisecond
			cfg.OnAttempt = func(_ Intent, _ int, status int, _ error) {
				attempts++
				require.Zero(t, status)
			}
		})
		_, err = c.Charge(context.Background(), visa)
		require.ErrorIs(t, err, ErrGaveUp)
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		require.Greater(t, attempts, 1)
	})
}

// TestResumePendingAfterCrash: a process journals an intent and dies after
// one attempt; a new process on the same journal resumes it with the
// original key and clears the journal.
func TestResumePendingAfterCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	// The first process: its server never answers finally, and the process
	// "dies" (its context ends) after the first attempt.
	first := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, _ int) {
		writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 0, nil)
	})
	j1, err := NewFileJournal(dir)
	require.NoError(t, err)
	ctx, crash := context.WithCancel(context.Background())
	c1 := newTestClient(t, first.srv.URL, func(cfg *Config) {
		cfg.Journal = j1
		cfg.OnAttempt = func(Intent, int, int, error) { crash() }
	})
	desc := "resume me"
	_, err = c1.Charge(ctx, ChargeParams{Amount: 500, Currency: "eur", PaymentMethod: "pm_card_visa", Description: &desc})
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrGaveUp)
	require.Len(t, first.requests(), 1)
	originalKey := first.requests()[0].Key

	// The second process: a new journal handle and client.
	var body []byte
	second := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, _ int) {
		writeCharge(w, http.StatusCreated, chargeBody("ch_resumed", ChargeParams{Amount: 500, Currency: "eur", PaymentMethod: "pm_card_visa", Description: &desc}), false)
	})
	j2, err := NewFileJournal(dir)
	require.NoError(t, err)
	c2 := newTestClient(t, second.srv.URL, func(cfg *Config) { cfg.Journal = j2 })
	results, err := c2.ResumePending(context.Background())
	require.NoError(t, err)
	require.Len(t, results, 1)
	require.NoError(t, results[0].Err)
	require.Equal(t, "ch_resumed", results[0].Charge.ID)
	require.Equal(t, originalKey, results[0].Intent.Key)

	reqs := second.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, originalKey, reqs[0].Key, "a resumed intent sends its original key")
	body = reqs[0].Body
	require.Equal(t, first.requests()[0].Body, body, "and its original body")

	left, err := j2.List()
	require.NoError(t, err)
	require.Empty(t, left)
}

// TestResumePendingSettlesOnlyFinalAnswers: a final error leaves the
// journal like a success; giving up does not.
func TestResumePendingSettlesOnlyFinalAnswers(t *testing.T) {
	t.Parallel()
	journal := NewMemoryJournal()
	now := time.Now().UTC()
	for i, key := range []string{"k-ok", "k-mismatch", "k-down"} {
		require.NoError(t, journal.Put(Intent{Key: key, Params: visa, CreatedAt: now.Add(time.Duration(i) * time.Second)}))
	}
	api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.Header.Get("Idempotency-Key") {
		case "k-ok":
			writeCharge(w, http.StatusCreated, chargeBody("ch_ok", visa), true)
		case "k-mismatch":
			writeProblem(w, http.StatusUnprocessableEntity, CodeIdempotencyKeyMismatch, "other request", 0, nil)
		default:
			writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 0, nil)
		}
	})
	c := newTestClient(t, api.srv.URL, func(cfg *Config) {
		cfg.Journal = journal
		cfg.MaxElapsed = 100 * time.Millisecond
	})
	results, err := c.ResumePending(context.Background())
	require.NoError(t, err)
	require.Len(t, results, 3)
	require.Equal(t, "k-ok", results[0].Intent.Key, "oldest first")
	require.NoError(t, results[0].Err)
	require.True(t, results[0].Charge.Replayed)
	require.ErrorIs(t, results[1].Err, ErrMismatch)
	require.ErrorIs(t, results[2].Err, ErrGaveUp)

	left, err := journal.List()
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "k-down", left[0].Key)
}

func TestExecuteUsesCallerKey(t *testing.T) {
	t.Parallel()
	journal := NewMemoryJournal()
	api := newFakeAPI(t, journal, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			writeProblem(w, http.StatusConflict, CodeIdempotencyKeyInUse, "in progress", 0, nil)
			return
		}
		writeCharge(w, http.StatusCreated, chargeBody("ch_h", visa), false)
	})
	c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.Journal = journal })
	_, err := c.Execute(context.Background(), Intent{Key: "harness/1", Params: visa})
	require.NoError(t, err)
	require.Equal(t, []string{"harness/1", "harness/1"}, api.keys())
	for _, r := range api.requests() {
		require.True(t, r.Journaled)
	}
	require.False(t, journal.Has("harness/1"))

	_, err = c.Execute(context.Background(), Intent{Params: visa})
	require.ErrorContains(t, err, "no key")
}

func TestGet(t *testing.T) {
	t.Parallel()
	body := chargeBody("ch_1", visa)
	api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case r.Method != http.MethodGet:
			writeProblem(w, http.StatusMethodNotAllowed, "method_not_allowed", "", 0, nil)
		case r.URL.Path != "/v1/charges/ch_1":
			writeProblem(w, http.StatusNotFound, "not_found", "No such resource.", 0, nil)
		case n == 1:
			writeProblem(w, http.StatusServiceUnavailable, "internal", "", 0, nil)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}
	})
	c := newTestClient(t, api.srv.URL, nil)

	ch, err := c.Get(context.Background(), "ch_1")
	require.NoError(t, err)
	require.Equal(t, "ch_1", ch.ID)
	require.Equal(t, body, ch.RawBody)
	require.Equal(t, time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC), ch.CreatedAt)
	require.Empty(t, api.requests()[0].Key, "a read sends no idempotency key")

	_, err = c.Get(context.Background(), "ch_nope/../x")
	require.ErrorIs(t, err, ErrNotFound)
}

// TestConcurrentCharges gives -race something to chew on: one Client, many
// goroutines, one distinct key per Charge.
func TestConcurrentCharges(t *testing.T) {
	t.Parallel()
	journal := NewMemoryJournal()
	api := newFakeAPI(t, journal, func(w http.ResponseWriter, r *http.Request, n int) {
		if n%3 == 0 {
			writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 0, nil)
			return
		}
		writeCharge(w, http.StatusCreated, chargeBody("ch_"+r.Header.Get("Idempotency-Key"), visa), false)
	})
	c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.Journal = journal })
	const n = 20
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := c.Charge(context.Background(), visa)
			if err == nil {
				ids[i] = ch.ID
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		require.NotEmpty(t, id)
		require.False(t, seen[id], "two intents shared a key")
		seen[id] = true
	}
	left, err := journal.List()
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestErrorIs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  *Error
		is   error
		want bool
	}{
		{&Error{Status: 402, Problem: Problem{Code: CodeCardDeclined}}, ErrDeclined, true},
		{&Error{Status: 402}, ErrDeclined, true},
		{&Error{Status: 402, Problem: Problem{Code: "other"}}, ErrDeclined, false},
		{&Error{Status: 422, Problem: Problem{Code: CodeIdempotencyKeyMismatch}}, ErrMismatch, true},
		{&Error{Status: 422}, ErrMismatch, true},
		{&Error{Status: 400, Problem: Problem{Code: "idempotency_key_missing"}}, ErrInvalidRequest, true},
		{&Error{Status: 401}, ErrUnauthorized, true},
		{&Error{Status: 404}, ErrNotFound, true},
		{&Error{Status: 409}, ErrInProgress, true},
		{&Error{Status: 503}, ErrUnavailable, true},
		{&Error{Status: 503, Problem: Problem{Code: CodeDatabaseUnavailable}}, ErrUnavailable, true},
		{&Error{Status: 503, Problem: Problem{Code: CodePaymentUnresolved}}, ErrUnavailable, false},
		{&Error{Status: 503, Problem: Problem{Code: CodePaymentUnresolved}}, ErrUnresolved, true},
		{&Error{Status: 503, Problem: Problem{Code: CodePSPUnavailable}}, ErrUnresolved, false},
		{&Error{Status: 429}, ErrUnavailable, true},
		{&Error{Status: 402, Problem: Problem{Code: CodePaymentFailed}}, ErrPaymentFailed, true},
		{&Error{Status: 402, Problem: Problem{Code: CodePaymentFailed}}, ErrDeclined, false},
		{&Error{Status: 402, Problem: Problem{Code: CodeCardDeclined}}, ErrPaymentFailed, false},
		{&Error{Status: 415}, ErrInvalidRequest, true},
		{&Error{Status: 500}, ErrUnavailable, false},
		{&Error{Status: 404}, ErrGaveUp, false},
	} {
		require.Equal(t, tt.want, errors.Is(tt.err, tt.is), "%v is %v", tt.err, tt.is)
	}
	e := &Error{Status: 402, Problem: Problem{Code: CodeCardDeclined, Detail: "declined\nby the PSP", Charge: "ch_x"}}
	require.Equal(t, "402 card_declined: declined by the PSP (charge ch_x)", e.Error())
	require.Equal(t, "502: Bad Gateway", (&Error{Status: 502}).Error())
}

// payment_unresolved stops the retries at once (only an operator can
// change the answer, so retrying for MaxElapsed would only load the server)
// but does not settle the intent: its outcome is unknown, and a later
// ResumePending, once the operator resolved it, gets the final answer.
func TestPaymentUnresolvedIsNotRetriedAndStaysJournaled(t *testing.T) {
	t.Parallel()
	journal := NewMemoryJournal()
	resolved := false
	var mu sync.Mutex
	api := newFakeAPI(t, journal, func(w http.ResponseWriter, r *http.Request, _ int) {
		mu.Lock()
		defer mu.Unlock()
		if resolved {
			writeProblem(w, http.StatusPaymentRequired, CodePaymentFailed, "resolved as failed by an operator", 0, map[string]any{"charge": "ch_1"})
			return
		}
		writeProblem(w, http.StatusServiceUnavailable, CodePaymentUnresolved, "waiting for an operator", 0, nil)
	})
	c := newTestClient(t, api.srv.URL, func(cfg *Config) {
		cfg.Journal = journal
		cfg.MaxElapsed = time.Minute
	})
	start := time.Now()
	_, err := c.Charge(context.Background(), visa)
	require.ErrorIs(t, err, ErrUnresolved)
	require.NotErrorIs(t, err, ErrGaveUp)
	require.NotErrorIs(t, err, ErrUnavailable)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Len(t, api.requests(), 1, "not retried")
	left, err := journal.List()
	require.NoError(t, err)
	require.Len(t, left, 1, "the outcome is unknown: the intent stays")

	mu.Lock()
	resolved = true
	mu.Unlock()
	results, err := c.ResumePending(context.Background())
	require.NoError(t, err)
	require.Len(t, results, 1)
	require.ErrorIs(t, results[0].Err, ErrPaymentFailed)
	require.Equal(t, left[0].Key, api.requests()[1].Key, "resumed under the same key")
	left, err = journal.List()
	require.NoError(t, err)
	require.Empty(t, left)
}

// 503 database_unavailable and psp_unavailable, and 429, are retried with
// the same key, each sleep at least the server's Retry-After.
func TestRetryableUnavailableHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusServiceUnavailable, CodeDatabaseUnavailable},
		{http.StatusServiceUnavailable, CodePSPUnavailable},
		{http.StatusTooManyRequests, ""},
	} {
		t.Run(tc.code+strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, n int) {
				if n < 3 {
					writeProblem(w, tc.status, tc.code, "later", 7, nil)
					return
				}
				writeCharge(w, http.StatusCreated, chargeBody("ch_1", visa), false)
			})
			c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.MaxElapsed = time.Minute })
			var waits []time.Duration
			c.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
			ch, err := c.Charge(context.Background(), visa)
			require.NoError(t, err)
			require.Equal(t, "ch_1", ch.ID)
			require.Len(t, waits, 2)
			for _, w := range waits {
				require.GreaterOrEqual(t, w, 7*time.Second)
			}
			reqs := api.requests()
			require.Len(t, reqs, 3)
			require.Equal(t, reqs[0].Key, reqs[2].Key)
		})
	}
}
