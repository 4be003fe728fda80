package charges_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/routing"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// Routing between PSPs: the pitfalls of failing over. Each world has real
// mock PSPs behind real HTTP servers and the real Router; a charge may move
// to the next PSP only when the one it is at certainly did not and will not
// authorize it.

const declined = `{"amount": 500, "currency": "usd", "payment_method": "pm_card_chargeDeclined"}`

type routedWorld struct {
	*chargestest.Bundle
	mocks   map[string]*mockpsp.Mock
	urls    map[string]string
	router  *routing.Router
	clock   atomic.Int64 // nanoseconds added to the breakers' clock
	cfg     routing.Config
	clients map[string]routing.Client
}

type routedConfig struct {
	faults map[string]mockpsp.Faults
	// slow delays a PSP's authorizations by this much BEFORE they reach
	// the mock: a request in flight, which a lookup cannot see yet.
	slow           map[string]time.Duration
	attemptTimeout time.Duration
	threshold      int
}

var pspNames = []string{"primary", "secondary", "tertiary"}

func newRoutedWorld(t *testing.T, rc routedConfig) *routedWorld {
	t.Helper()
	w := &routedWorld{Bundle: setup(t), mocks: map[string]*mockpsp.Mock{}, urls: map[string]string{}}
	cfg := routing.Config{Routes: map[string][]string{"*": pspNames}, BreakerThreshold: rc.threshold, BreakerCooldown: time.Minute}
	clients := map[string]routing.Client{}
	for _, name := range pspNames {
		mock, err := mockpsp.NewFromConfig(mockpsp.Config{Name: name, Faults: rc.faults[name]})
		require.NoError(t, err)
		var h http.Handler = mock
		if d := rc.slow[name]; d > 0 {
			h = inFlight(t, mock, d)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		c, err := psp.NewClient(psp.ClientConfig{BaseURL: srv.URL, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
			AttemptTimeout: rc.attemptTimeout})
		require.NoError(t, err)
		w.mocks[name], clients[name], w.urls[name] = mock, c, srv.URL
		cfg.PSPs = append(cfg.PSPs, routing.PSP{Name: name, URL: srv.URL})
	}
	w.cfg, w.clients = cfg, clients
	w.router = w.process(t)
	return w
}

// process is another process's Router over the same PSPs: breakers of its
// own, which learn only from its own calls.
func (w *routedWorld) process(t *testing.T) *routing.Router {
	t.Helper()
	r, err := routing.New(w.cfg, w.clients, routing.Options{Now: func() time.Time { return time.Now().Add(time.Duration(w.clock.Load())) }})
	require.NoError(t, err)
	return r
}

// inFlight hands each authorization to mock only after d, whether or not
// the client is still waiting: the PSP acts after its caller gave up, and a
// lookup made meanwhile finds nothing.
func inFlight(t *testing.T, mock *mockpsp.Mock, d time.Duration) http.Handler {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			mock.ServeHTTP(rw, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		late := r.Clone(context.Background())
		late.Body = io.NopCloser(bytes.NewReader(body))
		go func() {
			select {
			case <-time.After(d):
				mock.ServeHTTP(httptest.NewRecorder(), late)
			case <-done:
			}
		}()
		<-r.Context().Done() // the caller times out: no answer
	})
}

func (w *routedWorld) service(t *testing.T, offset time.Duration, cfg phases.Config) *charges.Service {
	t.Helper()
	return chargestest.NewService(t, w.PoolAt(t, offset), w.Keys, w.router, cfg)
}

// requests counts what a PSP received for a charge (every PSP request
// names its reference): sends and lookups.
func (w *routedWorld) requests(name, chargeID string) (sends, lookups int) {
	for _, r := range w.mocks[name].Requests() {
		if r.Reference != chargeID || r.Path != "/v1/authorizations" {
			continue
		}
		if r.Method == http.MethodPost {
			sends++
		} else {
			lookups++
		}
	}
	return sends, lookups
}

// authorized lists the PSPs holding an authorization (not a decline) for
// chargeID.
func (w *routedWorld) authorizedAt(chargeID string) []string {
	var at []string
	for _, name := range pspNames {
		for _, a := range w.mocks[name].Authorizations() {
			if a.Reference == chargeID && a.Status == psp.StatusAuthorized {
				at = append(at, name)
			}
		}
	}
	return at
}

type attemptRow struct {
	PSP, Key string
	Outcome  *string
}

func (w *routedWorld) attempts(t *testing.T, chargeID string) []attemptRow {
	t.Helper()
	rows, err := w.Pool.Query(context.Background(),
		`SELECT psp, psp_key, outcome FROM charge_attempts WHERE tenant_id = $1 AND charge_id = $2 ORDER BY n`, w.Tenant, chargeID)
	require.NoError(t, err)
	defer rows.Close()
	var out []attemptRow
	for rows.Next() {
		var a attemptRow
		require.NoError(t, rows.Scan(&a.PSP, &a.Key, &a.Outcome))
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

// chargeOfKey is the one charge of key.
func (w *routedWorld) chargeOfKey(t *testing.T, key string) *charges.Charge {
	t.Helper()
	ids := w.ChargeIDs(t, key)
	require.Len(t, ids, 1)
	c, err := w.service(t, 0, phases.Config{}).Get(context.Background(), w.Tenant, ids[0])
	require.NoError(t, err)
	return c
}

// crashAtNth dies at the nth time point is passed.
func crashAtNth(point phases.CrashPoint, n int) func(context.Context, phases.CrashPoint) error {
	var seen atomic.Int32
	return func(_ context.Context, at phases.CrashPoint) error {
		if at == point && int(seen.Add(1)) == n {
			return phasestest.ErrCrash
		}
		return nil
	}
}

// A PSP that refuses a charge (400: it did nothing and never will) is a
// reason to try the next: the refusal and the next attempt commit together
// before the second PSP is called, under a key of its own. Also when the
// worker dies after the refusal came back, or right after the failover
// committed: the takeover finishes at the second PSP, one authorization in
// all.
func TestFinalFailureFailsOver(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		crash func(context.Context, phases.CrashPoint) error
		one   bool
	}{
		{"no crash", nil, false},
		{"no crash, one commit per phase", nil, true},
		{"crash after the refusal", crashAtNth(phases.CrashAfterCall, 1), false},
		{"crash after the failover committed", crashAtNth(charges.CrashAfterChargeCreated, 1), false},
		{"crash after the second PSP answered", crashAtNth(phases.CrashAfterCall, 2), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newRoutedWorld(t, routedConfig{faults: map[string]mockpsp.Faults{"primary": {RejectRate: 1}}})
			req, _ := chargestest.Request(t, visa)
			res, err := w.service(t, 0, phases.Config{CrashHook: tt.crash, OneCommitPerPhase: tt.one}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
			if tt.crash != nil {
				require.ErrorIs(t, err, phasestest.ErrCrash)
				res, err = w.service(t, 2*time.Minute, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
			}
			require.NoError(t, err)
			require.Equal(t, 201, res.Response.Status, string(res.Response.Body))
			c := w.chargeOfKey(t, "k")
			require.Equal(t, charges.StatusAuthorized, c.Status)
			require.Equal(t, "secondary", c.PSP)
			require.Equal(t, []string{"secondary"}, w.authorizedAt(c.ID))
			sends, _ := w.requests("tertiary", c.ID)
			require.Zero(t, sends)
			att := w.attempts(t, c.ID)
			require.Len(t, att, 2)
			require.Equal(t, "primary", att[0].PSP)
			require.Equal(t, c.ID+":authorize:1", att[0].Key)
			require.Equal(t, "refused", *att[0].Outcome)
			require.Equal(t, "secondary", att[1].PSP)
			require.Equal(t, c.ID+":authorize:2", att[1].Key)
			require.Equal(t, "authorized", *att[1].Outcome)

			// Capture goes to the PSP that holds the authorization.
			creq, err := charges.ParseCaptureRequest(c.ID, []byte(`{}`))
			require.NoError(t, err)
			cap, err := w.service(t, 0, phases.Config{}).Capture(ctx, w.Tenant, "cap", c.ID, phases.Parsed(creq))
			require.NoError(t, err)
			require.Equal(t, 200, cap.Response.Status, string(cap.Response.Body))
			require.Len(t, captures(w.mocks["secondary"]), 1)
			require.Empty(t, captures(w.mocks["primary"]))
		})
	}
}

// The timeline of a charge that failed over says so: the refusal at the
// primary, then "moved" to the secondary, then the call there; the
// recovery point it never left is reached once, not twice.
func TestFailoverTimelineSaysMoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newRoutedWorld(t, routedConfig{faults: map[string]mockpsp.Faults{"primary": {RejectRate: 1}}})
	req, _ := chargestest.Request(t, visa)
	res, err := w.service(t, 0, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status)
	h, err := idempotency.ReadHistory(ctx, w.Pool, w.Tenant, "k")
	require.NoError(t, err)
	var got []string
	for _, e := range h.Entries {
		step := string(e.Kind)
		switch e.Kind {
		case idempotency.KindReached:
			step += " " + string(e.RecoveryPoint)
		case idempotency.KindPSPCall:
			step += " " + e.PSP + " " + e.Outcome
		case idempotency.KindMoved:
			step += " " + e.PSP
		}
		got = append(got, step)
	}
	require.Equal(t, []string{
		"claimed", "reached charge_created",
		"psp_call primary final_failure", "moved secondary",
		"psp_call secondary success", "finished",
	}, got)
}

func captures(m *mockpsp.Mock) []mockpsp.RequestEntry {
	var out []mockpsp.RequestEntry
	for _, r := range m.Requests() {
		if r.Method == http.MethodPost && r.Path == "/v1/captures" {
			out = append(out, r)
		}
	}
	return out
}

// A decline is the customer's bank's answer: final, at every PSP. It is
// never sent to another, not even when its answer was lost and a lookup
// found it.
func TestDeclineIsNeverSentToAnotherPSP(t *testing.T) {
	t.Parallel()
	for _, f := range []mockpsp.Faults{{}, {DropRate: 1}} {
		t.Run("drop_rate="+map[bool]string{true: "1", false: "0"}[f.DropRate == 1], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newRoutedWorld(t, routedConfig{faults: map[string]mockpsp.Faults{"primary": f}})
			req, _ := chargestest.Request(t, declined)
			res, err := w.service(t, 0, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
			require.NoError(t, err)
			require.Equal(t, 402, res.Response.Status)
			code, id, _ := problemOf(t, res.Response)
			require.Equal(t, "card_declined", code)
			for _, other := range []string{"secondary", "tertiary"} {
				sends, lookups := w.requests(other, id)
				require.Zero(t, sends+lookups, "%s never hears of a declined charge", other)
			}
			c := w.chargeOfKey(t, "k")
			require.Equal(t, charges.StatusDeclined, c.Status)
			require.Equal(t, "primary", c.PSP)
			require.Len(t, w.attempts(t, id), 1)
		})
	}
}

// An unknown outcome never moves a charge: the PSP may have it in flight.
// Here the primary acts on each authorization only after the caller timed
// out, so the lookup that follows finds nothing, yet: the charge stays at
// the primary (released on the retry schedule), and the takeover after the
// authorization landed finds it there. The second PSP never hears of it.
// A PSP that answers nothing at all (503s, lookups too) keeps the charge as
// well, however many times it is retried.
func TestUnknownOutcomeNeverFailsOver(t *testing.T) {
	t.Parallel()
	t.Run("in flight when the lookup said nothing", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		// The primary's delay is far longer than the attempt's timeout and
		// than the run's retries and lookups take even on a loaded machine
		// (with 400 ms, a make test under load once saw it land before
		// Create returned).
		w := newRoutedWorld(t, routedConfig{slow: map[string]time.Duration{"primary": 1500 * time.Millisecond}, attemptTimeout: 100 * time.Millisecond})
		req, _ := chargestest.Request(t, visa)
		_, err := w.service(t, 0, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
		require.ErrorIs(t, err, charges.ErrPSPUnavailable)
		c := w.chargeOfKey(t, "k")
		require.Equal(t, charges.StatusPending, c.Status)
		require.Equal(t, "primary", c.PSP)
		_, lookups := w.requests("primary", c.ID)
		require.Positive(t, lookups, "the primary was asked, and said nothing")
		require.Empty(t, w.authorizedAt(c.ID), "not yet: still in flight")
		state, point, _ := w.KeyState(t, "k")
		require.Equal(t, "started", state)
		require.Equal(t, string(charges.PointChargeCreated), point)

		require.Eventually(t, func() bool { return len(w.authorizedAt(c.ID)) > 0 }, 5*time.Second, 20*time.Millisecond)
		res, err := w.service(t, 2*time.Minute, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
		require.NoError(t, err)
		require.Equal(t, 201, res.Response.Status, string(res.Response.Body))
		c = w.chargeOfKey(t, "k")
		require.Equal(t, "primary", c.PSP)
		require.Equal(t, []string{"primary"}, w.authorizedAt(c.ID))
		for _, other := range []string{"secondary", "tertiary"} {
			sends, lookups := w.requests(other, c.ID)
			require.Zero(t, sends+lookups, "%s never hears of it", other)
		}
		require.Len(t, w.attempts(t, c.ID), 1)
	})
	t.Run("PSP answers nothing", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newRoutedWorld(t, routedConfig{faults: map[string]mockpsp.Faults{"primary": {ErrorRate: 1}}})
		req, _ := chargestest.Request(t, visa)
		for i := range 4 {
			_, err := w.service(t, time.Duration(i)*2*time.Minute, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
			require.True(t, errors.Is(err, charges.ErrPSPUnavailable) || errors.Is(err, idempotency.ErrInProgress), "%v", err)
		}
		c := w.chargeOfKey(t, "k")
		require.Equal(t, charges.StatusPending, c.Status)
		require.Equal(t, "primary", c.PSP)
		sends, _ := w.requests("secondary", c.ID)
		require.Zero(t, sends)
		require.NoError(t, w.mocks["primary"].SetFaults(mockpsp.Faults{}))
		res, err := w.service(t, time.Hour, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
		require.NoError(t, err)
		require.Equal(t, 201, res.Response.Status, string(res.Response.Body))
		require.Equal(t, []string{"primary"}, w.authorizedAt(c.ID))
	})
}

// After a crash, every PSP the charge was sent to is asked before anything
// is sent: an authorization held at any of them is the answer. The charge
// failed over to the secondary, which authorized it; the worker died before
// that answer committed. The takeover looks up the primary and the
// secondary first, and resends nothing. And where the primary (against its
// refusal) held an authorization, the takeover records that one, at the
// primary, and sends nothing to anyone.
func TestTakeoverLooksUpEveryAttemptedPSP(t *testing.T) {
	t.Parallel()
	for _, heldAtPrimary := range []bool{false, true} {
		name := map[bool]string{false: "held at the second", true: "held at the first"}[heldAtPrimary]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newRoutedWorld(t, routedConfig{faults: map[string]mockpsp.Faults{"primary": {RejectRate: 1}}})
			req, _ := chargestest.Request(t, visa)
			crash := crashAtNth(phases.CrashAfterCall, 2)
			if heldAtPrimary {
				crash = crashAtNth(charges.CrashAfterChargeCreated, 1) // after the failover, before the second PSP
			}
			_, err := w.service(t, 0, phases.Config{CrashHook: crash}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
			require.ErrorIs(t, err, phasestest.ErrCrash)
			c := w.chargeOfKey(t, "k")
			want := "secondary"
			if heldAtPrimary {
				want = "primary"
				require.NoError(t, w.mocks["primary"].SetFaults(mockpsp.Faults{}))
				direct, err := psp.NewClient(psp.ClientConfig{BaseURL: w.urls["primary"]})
				require.NoError(t, err)
				_, err = direct.AuthorizeOnce(ctx, psp.AuthorizeRequest{IdempotencyKey: "elsewhere", Amount: c.Amount, Currency: c.Currency,
					PaymentMethod: c.PaymentMethod, Reference: c.ID})
				require.NoError(t, err)
			}
			before := map[string]int{}
			for _, n := range pspNames {
				before[n] = len(w.mocks[n].Requests())
			}

			res, err := w.service(t, 2*time.Minute, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
			require.NoError(t, err)
			require.Equal(t, 201, res.Response.Status, string(res.Response.Body))
			for _, n := range []string{"primary", "secondary"} {
				after := w.mocks[n].Requests()[before[n]:]
				if heldAtPrimary && n == "secondary" {
					require.Empty(t, after, "found at the primary: nothing else asked")
					continue
				}
				require.NotEmpty(t, after, "%s was asked", n)
				require.Equal(t, http.MethodGet, after[0].Method, "%s: a lookup before anything is sent", n)
				for _, r := range after {
					require.Equal(t, http.MethodGet, r.Method, "%s: nothing sent again", n)
				}
			}
			c = w.chargeOfKey(t, "k")
			require.Equal(t, want, c.PSP)
			require.Equal(t, []string{want}, w.authorizedAt(c.ID))
			require.Empty(t, w.mocks["tertiary"].Requests())
		})
	}
}

// A PSP that stops answering opens its breaker after a few unknown
// outcomes. A new charge whose id is random (past the incarnation bound of
// derived ids) then starts at the next PSP of its route, which is safe
// because nothing can have been sent to the first for it. A charge whose id
// is derived starts at the first whatever the breaker says, and waits there:
// a claim lost in a failover may have sent it there (pitfall F3 "A second PSP after a lost claim"). The
// charges caught at the first stay there. After the cool-down one new
// random-id charge probes the first again, and its answer closes the
// breaker.
func TestBreakerSendsNewChargesElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newRoutedWorld(t, routedConfig{faults: map[string]mockpsp.Faults{"primary": {ErrorRate: 1}}, threshold: 2})
	derived := w.service(t, 0, phases.Config{})
	req, _ := chargestest.Request(t, visa)
	for _, k := range []string{"a", "b"} {
		_, err := derived.Create(ctx, w.Tenant, k, phases.Parsed(req))
		require.ErrorIs(t, err, charges.ErrPSPUnavailable)
	}
	require.Equal(t, routing.Open, w.router.BreakerState("primary"))
	_, err := derived.Create(ctx, w.Tenant, "pinned", phases.Parsed(req))
	require.ErrorIs(t, err, charges.ErrPSPUnavailable, "a derived id starts at its route's first PSP, open breaker or not")
	pinned := w.chargeOfKey(t, "pinned")
	require.Equal(t, "primary", pinned.PSP)
	sends, _ := w.requests("primary", pinned.ID)
	require.Zero(t, sends, "held back by the open breaker: nothing sent to a PSP known to fail")

	svc := w.service(t, 0, phases.Config{})
	charges.RandomIDs(svc)
	res, err := svc.Create(ctx, w.Tenant, "c", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status, string(res.Response.Body))
	c := w.chargeOfKey(t, "c")
	require.Equal(t, "secondary", c.PSP)
	sends, lookups := w.requests("primary", c.ID)
	require.Zero(t, sends+lookups, "routed around the open breaker: the primary never heard of it")
	for _, k := range []string{"a", "b", "pinned"} {
		stuck := w.chargeOfKey(t, k)
		require.Equal(t, "primary", stuck.PSP, "a charge caught by the outage stays")
		sends, _ := w.requests("secondary", stuck.ID)
		require.Zero(t, sends)
	}

	// The cool-down passes and the primary is back: the next new charge
	// probes it, and its success closes the breaker.
	require.NoError(t, w.mocks["primary"].SetFaults(mockpsp.Faults{}))
	w.clock.Add(int64(2 * time.Minute))
	res, err = svc.Create(ctx, w.Tenant, "d", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status)
	require.Equal(t, "primary", w.chargeOfKey(t, "d").PSP)
	require.Equal(t, routing.Closed, w.router.BreakerState("primary"))
}

// An operator who resolves a charge that was routed between PSPs must know,
// and leave on record, which PSP holds its authorization: the charge's
// capture and refunds go there, and the audit says where the funds are.
// The resolution looks the charge up at every PSP it was sent to, names
// the PSP in what it records, puts it on the charge and ends that PSP's
// attempt as authorized.
func TestResolveRecordsThePSPThatHoldsTheAuthorization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newRoutedWorld(t, routedConfig{
		faults:         map[string]mockpsp.Faults{"primary": {RejectRate: 1}},
		slow:           map[string]time.Duration{"secondary": 2 * time.Second},
		attemptTimeout: 100 * time.Millisecond,
	})
	svc := w.service(t, 0, phases.Config{})
	req, _ := chargestest.Request(t, visa)
	_, err := svc.Create(ctx, w.Tenant, "k", phases.Parsed(req))
	require.ErrorIs(t, err, charges.ErrPSPUnavailable, "refused at the primary, unknown at the secondary")
	// Given up (GIVE_UP_AFTER, as the reaper's release would).
	_, err = w.Pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'needs_attention', next_attempt_at = NULL WHERE tenant_id = $1 AND key = 'k'`, w.Tenant)
	require.NoError(t, err)
	c := w.chargeOfKey(t, "k")
	require.Eventually(t, func() bool { return len(w.authorizedAt(c.ID)) == 1 }, 5*time.Second, 20*time.Millisecond,
		"the secondary's authorization lands after the client gave up")

	_, err = svc.Resolve(ctx, w.Tenant, "k", charges.Resolution{As: charges.ResolveSucceeded, Reason: "PSP support confirmed", By: "ops"})
	require.NoError(t, err)
	resolved := w.chargeOfKey(t, "k")
	require.Equal(t, charges.StatusAuthorized, resolved.Status)
	require.Equal(t, "secondary", resolved.PSP)
	attempts := w.attempts(t, c.ID)
	require.Len(t, attempts, 2)
	require.Equal(t, "secondary", attempts[1].PSP)
	require.NotNil(t, attempts[1].Outcome)
	require.Equal(t, "authorized", *attempts[1].Outcome)
	rec, err := w.Keys.Lookup(ctx, w.Pool, w.Tenant, "k")
	require.NoError(t, err)
	res, err := charges.ResolutionsOf(ctx, w.Pool, rec.ID())
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NotNil(t, res[0].PSPSaid)
	require.Contains(t, *res[0].PSPSaid, "at secondary")
}
