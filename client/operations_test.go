package client

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func int64p(v int64) *int64 { return &v }

// capturedBody is a charge object after a capture of amount.
func capturedBody(id string, status ChargeStatus, captured int64) []byte {
	b, err := json.Marshal(map[string]any{
		"id": id, "object": "charge", "amount": 1000, "currency": "usd", "payment_method": "pm_card_visa",
		"status": status, "amount_captured": captured, "amount_refunded": 0, "psp": "mock",
		"psp_reference": "auth_" + id, "description": nil, "metadata": map[string]string{}, "created_at": "2025-01-31T12:00:00Z",
	})
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

func refundBody(id, charge string, amount int64) []byte {
	b, err := json.Marshal(map[string]any{
		"id": id, "object": "refund", "charge": charge, "amount": amount, "status": "succeeded",
		"psp_reference": "rf_" + id, "created_at": "2025-01-31T12:00:01Z",
	})
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// TestOperationRetriesReuseTheKey: capture, void and refund each send
// their wire shape, journal the key before the first attempt, send that one
// key on every retry, wait at least a 409 charge_pending's Retry-After, and
// leave the journal once answered.
func TestOperationRetriesReuseTheKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		call    func(t *testing.T, c *Client) (id string, err error)
		path    string
		body    map[string]any
		answer  []byte
		created bool
	}{
		{
			name: "CapturePart", path: "/v1/charges/ch_1/capture", body: map[string]any{"amount": 600.0},
			answer: capturedBody("ch_1", StatusCaptured, 600),
			call: func(t *testing.T, c *Client) (string, error) {
				ch, err := c.Capture(context.Background(), "ch_1", CaptureParams{Amount: int64p(600)})
				if err != nil {
					return "", err
				}
				require.Equal(t, StatusCaptured, ch.Status)
				require.Equal(t, int64(600), ch.AmountCaptured)
				require.Equal(t, "mock", ch.PSP)
				return ch.ID, nil
			},
		},
		{
			name: "CaptureAll", path: "/v1/charges/ch_1/capture", body: map[string]any{},
			answer: capturedBody("ch_1", StatusCaptured, 1000),
			call: func(_ *testing.T, c *Client) (string, error) {
				ch, err := c.Capture(context.Background(), "ch_1", CaptureParams{})
				if err != nil {
					return "", err
				}
				return ch.ID, nil
			},
		},
		{
			name: "Void", path: "/v1/charges/ch_1/void", body: map[string]any{},
			answer: capturedBody("ch_1", StatusVoided, 0),
			call: func(_ *testing.T, c *Client) (string, error) {
				ch, err := c.Void(context.Background(), "ch_1")
				if err != nil {
					return "", err
				}
				return ch.ID, nil
			},
		},
		{
			name: "Refund", path: "/v1/refunds", body: map[string]any{"charge": "ch_1", "amount": 250.0},
			answer: refundBody("re_1", "ch_1", 250), created: true,
			call: func(t *testing.T, c *Client) (string, error) {
				r, err := c.Refund(context.Background(), RefundParams{Charge: "ch_1", Amount: int64p(250)})
				if err != nil {
					return "", err
				}
				require.Equal(t, RefundSucceeded, r.Status)
				require.Equal(t, int64(250), r.Amount)
				require.Equal(t, "ch_1", r.Charge)
				return r.ID, nil
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			journal := NewMemoryJournal()
			api := newFakeAPI(t, journal, func(w http.ResponseWriter, r *http.Request, n int) {
				switch n {
				case 1:
					writeProblem(w, http.StatusConflict, CodeChargePending, "authorization unresolved", 3, map[string]any{"charge": "ch_1"})
				case 2:
					writeProblem(w, http.StatusServiceUnavailable, CodePSPUnavailable, "psp down", 0, nil)
				case 3:
					writeProblem(w, http.StatusConflict, CodeIdempotencyKeyInUse, "in progress", 0, nil)
				default:
					status := http.StatusOK
					if tc.created {
						status = http.StatusCreated
					}
					writeCharge(w, status, tc.answer, false)
				}
			})
			var waits []time.Duration
			c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.Journal = journal; cfg.MaxElapsed = time.Minute })
			c.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }

			id, err := tc.call(t, c)
			require.NoError(t, err)
			require.Contains(t, []string{"ch_1", "re_1"}, id)

			reqs := api.requests()
			require.Len(t, reqs, 4)
			for _, r := range reqs {
				require.NotEmpty(t, r.Key)
				require.Equal(t, reqs[0].Key, r.Key, "every attempt carries the intent's one key")
				require.True(t, r.Journaled, "the key is journaled before any request carries it")
				require.Equal(t, http.MethodPost, r.Method)
				require.Equal(t, tc.path, r.Path)
				require.Equal(t, reqs[0].Body, r.Body, "the same body on every attempt")
			}
			var sent map[string]any
			require.NoError(t, json.Unmarshal(reqs[0].Body, &sent))
			require.Equal(t, tc.body, sent)
			require.Len(t, waits, 3)
			require.GreaterOrEqual(t, waits[0], 3*time.Second, "409 charge_pending is retried no sooner than its Retry-After")
			left, err := journal.List()
			require.NoError(t, err)
			require.Empty(t, left, "an answered intent leaves the journal")
		})
	}
}

// TestOperationFinalAnswers: a refusal for the charge's state is final and
// stored (ErrNotAllowed, not ErrInvalidRequest, sent once, journal
// emptied); payment_unresolved stops the retries and keeps the intent
// journaled, and so does giving up.
func TestOperationFinalAnswers(t *testing.T) {
	t.Parallel()

	t.Run("NotAllowed", func(t *testing.T) {
		t.Parallel()
		journal := NewMemoryJournal()
		api := newFakeAPI(t, journal, func(w http.ResponseWriter, _ *http.Request, _ int) {
			writeProblem(w, http.StatusBadRequest, CodeChargeNotCapturable, "Charge ch_1 is voided and cannot be captured.", 0,
				map[string]any{"charge": "ch_1"})
		})
		c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.Journal = journal })
		_, err := c.Capture(context.Background(), "ch_1", CaptureParams{})
		require.ErrorIs(t, err, ErrNotAllowed)
		require.NotErrorIs(t, err, ErrInvalidRequest, "the answer is stored: the key is spent")
		require.ErrorContains(t, err, "capture ch_1 with idempotency key ")
		require.Len(t, api.requests(), 1)
		left, _ := journal.List()
		require.Empty(t, left)
	})

	t.Run("UnresolvedStaysJournaled", func(t *testing.T) {
		t.Parallel()
		journal := NewMemoryJournal()
		api := newFakeAPI(t, journal, func(w http.ResponseWriter, _ *http.Request, _ int) {
			writeProblem(w, http.StatusServiceUnavailable, CodePaymentUnresolved, "Waiting for an operator.", 0, nil)
		})
		c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.Journal = journal })
		_, err := c.Refund(context.Background(), RefundParams{Charge: "ch_1"})
		require.ErrorIs(t, err, ErrUnresolved)
		require.Len(t, api.requests(), 1, "no retry can help until an operator acts")
		require.True(t, journal.Has(api.requests()[0].Key), "the outcome is unknown: the intent stays")
	})

	t.Run("GaveUpStaysJournaled", func(t *testing.T) {
		t.Parallel()
		journal := NewMemoryJournal()
		api := newFakeAPI(t, journal, func(w http.ResponseWriter, _ *http.Request, _ int) {
			writeProblem(w, http.StatusConflict, CodeChargePending, "authorization unresolved", 0, nil)
		})
		c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.Journal = journal; cfg.MaxElapsed = 50 * time.Millisecond })
		_, err := c.Void(context.Background(), "ch_1")
		require.ErrorIs(t, err, ErrGaveUp)
		require.ErrorIs(t, err, ErrChargePending)
		require.NotErrorIs(t, err, ErrInProgress)
		require.True(t, journal.Has(api.requests()[0].Key))
	})

	t.Run("BadIDsAreNotSentNorJournaled", func(t *testing.T) {
		t.Parallel()
		journal := NewMemoryJournal()
		api := newFakeAPI(t, journal, func(w http.ResponseWriter, _ *http.Request, _ int) {
			writeProblem(w, http.StatusInternalServerError, "internal", "", 0, nil)
		})
		c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.Journal = journal })
		_, err := c.Capture(context.Background(), "", CaptureParams{})
		require.ErrorContains(t, err, "empty charge id")
		_, err = c.Void(context.Background(), "..")
		require.ErrorContains(t, err, "is not an id")
		_, err = c.Refund(context.Background(), RefundParams{})
		require.ErrorContains(t, err, "empty charge id")
		require.Empty(t, api.requests())
		left, _ := journal.List()
		require.Empty(t, left)
	})
}

// TestResumeOperationsFromFileJournal: intents of every op survive a
// restart in a FileJournal and are resumed with their key, path and body;
// an intent journaled before ops existed (no "op") resumes as a charge.
func TestResumeOperationsFromFileJournal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	journal, err := NewFileJournal(dir)
	require.NoError(t, err)
	base := time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC)
	intents := []Intent{
		{Key: "k-charge", Params: visa, CreatedAt: base},
		{Key: "k-capture", Op: OpCapture, ChargeID: "ch_1", Capture: CaptureParams{Amount: int64p(700)}, CreatedAt: base.Add(time.Second)},
		{Key: "k-void", Op: OpVoid, ChargeID: "ch_2", CreatedAt: base.Add(2 * time.Second)},
		{Key: "k-refund", Op: OpRefund, Refund: RefundParams{Charge: "ch_1", Amount: int64p(100)}, CreatedAt: base.Add(3 * time.Second)},
	}
	for _, in := range intents {
		require.NoError(t, journal.Put(in))
	}
	raw, err := os.ReadFile(filepath.Join(dir, filepath.Base(journal.path("k-charge"))))
	require.NoError(t, err)
	var old map[string]any
	require.NoError(t, json.Unmarshal(raw, &old))
	require.ElementsMatch(t, []string{"key", "params", "created_at"}, keysOf(old), "a charge intent is written as before ops existed")

	api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/v1/charges":
			writeCharge(w, http.StatusCreated, chargeBody("ch_9", visa), false)
		case "/v1/charges/ch_1/capture":
			writeCharge(w, http.StatusOK, capturedBody("ch_1", StatusCaptured, 700), true)
		case "/v1/charges/ch_2/void":
			writeCharge(w, http.StatusOK, capturedBody("ch_2", StatusVoided, 0), false)
		case "/v1/refunds":
			writeCharge(w, http.StatusCreated, refundBody("re_1", "ch_1", 100), false)
		}
	})
	reopened, err := NewFileJournal(dir)
	require.NoError(t, err)
	c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.Journal = reopened })
	results, err := c.ResumePending(context.Background())
	require.NoError(t, err)
	require.Len(t, results, 4)
	for _, r := range results {
		require.NoError(t, r.Err, r.Intent.Key)
	}
	require.Equal(t, "ch_9", results[0].Charge.ID)
	require.Equal(t, StatusCaptured, results[1].Charge.Status)
	require.True(t, results[1].Charge.Replayed)
	require.Equal(t, StatusVoided, results[2].Charge.Status)
	require.Nil(t, results[3].Charge)
	require.Equal(t, "re_1", results[3].Refund.ID)

	reqs := api.requests()
	require.Equal(t, []string{"k-charge", "k-capture", "k-void", "k-refund"}, api.keys(), "each with its journaled key, oldest first")
	require.JSONEq(t, `{"amount":700}`, string(reqs[1].Body))
	require.JSONEq(t, `{}`, string(reqs[2].Body))
	require.JSONEq(t, `{"charge":"ch_1","amount":100}`, string(reqs[3].Body))
	left, err := reopened.List()
	require.NoError(t, err)
	require.Empty(t, left)
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestGetRefund(t *testing.T) {
	t.Parallel()
	body := refundBody("re_1", "ch_1", 300)
	api := newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case r.URL.Path != "/v1/refunds/re_1":
			writeProblem(w, http.StatusNotFound, "not_found", "No such resource.", 0, nil)
		case n == 1:
			writeProblem(w, http.StatusServiceUnavailable, CodeDatabaseUnavailable, "", 0, nil)
		default:
			writeCharge(w, http.StatusOK, body, false)
		}
	})
	c := newTestClient(t, api.srv.URL, nil)
	r, err := c.GetRefund(context.Background(), "re_1")
	require.NoError(t, err)
	require.Equal(t, "ch_1", r.Charge)
	require.Equal(t, body, r.RawBody)
	require.Empty(t, api.requests()[0].Key, "a read sends no idempotency key")

	_, err = c.GetRefund(context.Background(), "re_x/../1")
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, "/v1/refunds/re_x/../1", api.requests()[2].Path, "the id is one escaped segment, not cleaned away")
}

// TestExecuteRefusesRefundIntent: Execute answers charges only; Do runs
// any op.
func TestExecuteRefusesRefundIntent(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "http://127.0.0.1:1", nil)
	_, err := c.Execute(context.Background(), NewRefundIntent(RefundParams{Charge: "ch_1"}))
	require.ErrorContains(t, err, "use Do")
}

// TestResumeKeepsAnIntentItCannotSend: an intent of an op this version
// does not know (journaled by a newer one) is reported, never sent, and
// stays journaled rather than being dropped.
func TestResumeKeepsAnIntentItCannotSend(t *testing.T) {
	t.Parallel()
	journal := NewMemoryJournal()
	require.NoError(t, journal.Put(Intent{Key: "k-future", Op: "dispute", ChargeID: "ch_1"}))
	api := newFakeAPI(t, nil, func(w http.ResponseWriter, _ *http.Request, _ int) {
		writeProblem(w, http.StatusInternalServerError, "internal", "", 0, nil)
	})
	c := newTestClient(t, api.srv.URL, func(cfg *Config) { cfg.Journal = journal })
	results, err := c.ResumePending(context.Background())
	require.NoError(t, err)
	require.Len(t, results, 1)
	require.ErrorContains(t, results[0].Err, `unknown op "dispute"`)
	require.Empty(t, api.requests())
	require.True(t, journal.Has("k-future"))
	require.ErrorContains(t, c.Do(context.Background(), Intent{Key: "k-2", Op: "dispute"}).Err, "unknown op")
	require.False(t, journal.Has("k-2"), "Do refuses it before journaling")
}

// TestBodiesAreSentInCanonicalForm: the bytes an intent sends are the
// server's canonical form of its request (RFC 8785: members by name, no
// white space, no HTML escaping), so that a retry is answered from one read
// of its key without being parsed (internal/charges
// TestClientBodiesAreCanonical holds the same texts on the server's side).
func TestBodiesAreSentInCanonicalForm(t *testing.T) {
	c, err := New(Config{BaseURL: "http://127.0.0.1:1", APIKey: "sk_test"})
	if err != nil {
		t.Fatal(err)
	}
	desc := "tea <for> two & more"
	amount := int64(500)
	for _, tc := range []struct {
		in   Intent
		want string
	}{
		{Intent{Key: "k1", Params: ChargeParams{Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa"}},
			`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`},
		{Intent{Key: "k2", Params: ChargeParams{Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa",
			Description: &desc, Metadata: map[string]string{"order": "42", "customer": "c&1"}}},
			`{"amount":1000,"currency":"usd","description":"tea <for> two & more","metadata":{"customer":"c&1","order":"42"},"payment_method":"pm_card_visa"}`},
		{Intent{Key: "k3", Op: OpRefund, Refund: RefundParams{Charge: "ch_1", Amount: &amount}},
			`{"amount":500,"charge":"ch_1"}`},
	} {
		_, body, err := c.request(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != tc.want {
			t.Errorf("%s: sent %s\nwant      %s", tc.in.Key, body, tc.want)
		}
	}
}
