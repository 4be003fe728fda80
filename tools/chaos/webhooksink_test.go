package chaos

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/webhooks"
)

// The sink accepts a correctly signed delivery, and reports as violations
// a delivery whose signature does not verify and an event id delivered
// again with another payload: it can fail.
func TestWebhookSinkVerifiesSignaturesAndPayloads(t *testing.T) {
	t.Parallel()
	cfg := &Config{Seed: 1, WebhookFaults: SinkFaults{ErrorRate: 1e-12}}
	sink, err := startSink(cfg)
	require.NoError(t, err)
	t.Cleanup(sink.close)
	const secret = "whsec_chaos_test"
	sink.setSecret(secret)
	post := func(body []byte, sig string) int {
		req, err := http.NewRequest(http.MethodPost, sink.url, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Phasepay-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	body := []byte(`{"id":"evt_1","object":"event","type":"charge.authorized","created_at":"2026-01-01T00:00:00Z","data":{"object":{"id":"ch_1","status":"authorized"}}}`)
	require.Equal(t, http.StatusOK, post(body, webhooks.Sign(secret, time.Now(), body)))
	require.Equal(t, http.StatusOK, post(body, webhooks.Sign(secret, time.Now(), body)))
	sink.mu.Lock()
	require.Empty(t, sink.violations)
	require.Equal(t, 2, sink.events["evt_1"].accepted)
	sink.mu.Unlock()

	require.Equal(t, http.StatusBadRequest, post(body, webhooks.Sign("whsec_other", time.Now(), body)))
	changed := bytes.Replace(body, []byte(`"authorized"}`), []byte(`"declined"}`), 1)
	require.Equal(t, http.StatusOK, post(changed, webhooks.Sign(secret, time.Now(), changed)))
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Len(t, sink.violations, 2)
	require.Contains(t, sink.violations[0], "bad signature")
	require.Contains(t, sink.violations[1], "different payloads")
}

// An event agrees with its object's final state or is reported as one for
// a change that did not commit; each final state names the events it
// implies.
func TestWebhookEventsHeldAgainstFinalState(t *testing.T) {
	t.Parallel()
	charge := func(status, ref string, captured int64) finalObject {
		return finalObject{kind: "charge", status: status, pspRef: ref, amount: captured}
	}
	require.Empty(t, disagrees("charge.authorized", eventObject{ID: "ch_1", Status: "authorized", PSPReference: "auth_1"}, charge("captured", "auth_1", 5), true))
	require.NotEmpty(t, disagrees("charge.authorized", eventObject{ID: "ch_1", Status: "authorized", PSPReference: "auth_1"}, charge("failed", "", 0), true))
	require.NotEmpty(t, disagrees("charge.captured", eventObject{ID: "ch_1", Status: "captured", AmountCaptured: 7}, charge("captured", "auth_1", 5), true))
	require.NotEmpty(t, disagrees("charge.voided", eventObject{ID: "ch_1", Status: "voided"}, charge("authorized", "auth_1", 0), true))
	require.NotEmpty(t, disagrees("charge.voided", eventObject{ID: "ch_1", Status: "captured"}, charge("voided", "auth_1", 0), true))
	require.NotEmpty(t, disagrees("charge.declined", eventObject{ID: "ch_1", Status: "declined"}, finalObject{}, false))
	require.Empty(t, disagrees("refund.succeeded", eventObject{ID: "re_1", Status: "succeeded", Amount: 3}, finalObject{kind: "refund", status: "succeeded", amount: 3}, true))
	require.NotEmpty(t, disagrees("refund.succeeded", eventObject{ID: "re_1", Status: "succeeded", Amount: 3}, finalObject{kind: "refund", status: "pending", amount: 3}, true))
	require.Empty(t, disagrees("request.needs_attention", eventObject{Key: "k", State: "needs_attention"}, finalObject{kind: "key", status: "needs_attention"}, true))

	require.Equal(t, []string{"charge.authorized", "charge.captured"}, wantEvents(charge("captured", "auth_1", 5)))
	require.Equal(t, []string{"charge.declined"}, wantEvents(charge("declined", "", 0)))
	require.Nil(t, wantEvents(charge("pending", "", 0)))
	require.Equal(t, []string{"refund.failed"}, wantEvents(finalObject{kind: "refund", status: "failed"}))

	p50, p99, pmax := latencyPercentiles([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond, 100 * time.Millisecond})
	require.Equal(t, []time.Duration{2 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}, []time.Duration{p50, p99, pmax})
}

// Every planned life fits its charge: a partial capture below the amount,
// refund shares that never sum past the capture.
func TestLivesPlannedWithinTheirCharge(t *testing.T) {
	t.Parallel()
	intents := make([]*intent, 500)
	for i := range intents {
		intents[i] = &intent{}
		intents[i].in.Params.Amount = 100 + int64(i)*37
	}
	planLives(3, intents)
	var voids, races, refunds int
	for _, it := range intents {
		p := it.life.plan
		if p.capture != nil {
			require.Positive(t, *p.capture)
			require.Less(t, *p.capture, it.in.Params.Amount)
		}
		sum := 0
		for _, s := range p.shares {
			require.GreaterOrEqual(t, s, 50)
			sum += s
		}
		require.LessOrEqual(t, sum, 1000)
		voids += map[bool]int{true: 1}[p.void]
		races += map[bool]int{true: 1}[p.race]
		refunds += len(p.shares)
	}
	require.Positive(t, voids)
	require.Positive(t, races)
	require.Positive(t, refunds)
}

// The fairness check can fail: first attempts later than the bound after
// their commits, at the 99th percentile, are a violation; events committed
// around a database restart are left out; a hanging tenant whose
// endpoints received nothing, or whose 17th endpoint was accepted, is
// reported.
func TestLateFirstAttemptsAreAViolation(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sinkWith := func(late time.Duration) (*webhookSink, []dbEvent) {
		s := &webhookSink{events: map[string]*sinkEvent{}, committed: map[string]time.Time{}}
		var evs []dbEvent
		for i := range 100 {
			id := fmt.Sprintf("evt_%d", i)
			committed := at.Add(time.Duration(i) * time.Second)
			lat := 20 * time.Millisecond
			if i >= 98 {
				lat = late
			}
			s.events[id] = &sinkEvent{firstReceived: committed.Add(lat)}
			s.committed[id] = committed
			evs = append(evs, dbEvent{ID: id})
		}
		return s, evs
	}
	check := func(s *webhookSink, evs []dbEvent, down []downWindow, h *hangingTenant) (WebhookStats, []string) {
		var (
			st  WebhookStats
			got []string
		)
		checkFairness(s, h, evs, down, &st, func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
		return st, got
	}

	s, evs := sinkWith(fairBound - time.Millisecond)
	st, v := check(s, evs, nil, nil)
	require.Empty(t, v)
	require.Equal(t, (fairBound - time.Millisecond).String(), st.FirstAttemptP99)
	s, evs = sinkWith(fairBound + time.Second)
	_, v = check(s, evs, nil, nil)
	require.Len(t, v, 1)
	require.Contains(t, v[0], "over the bound")

	// The late events were committed at 98 s and 99 s.
	s, evs = sinkWith(30 * time.Second)
	st, v = check(s, evs, []downWindow{{from: at.Add(101 * time.Second), to: at.Add(110 * time.Second)}}, nil)
	require.Len(t, v, 1, "the event at 98 s is not around the restart")
	require.Equal(t, 1, st.FirstAttemptExcluded)
	st, v = check(s, evs, []downWindow{{from: at.Add(100 * time.Second), to: at.Add(110 * time.Second)}}, nil)
	require.Empty(t, v, "both late events committed within the bound before the restart")
	require.Equal(t, 2, st.FirstAttemptExcluded)

	s, evs = sinkWith(0)
	_, v = check(s, evs, nil, &hangingTenant{violations: []string{"the 17th endpoint was accepted"}})
	require.Len(t, v, 2)
	require.Contains(t, v[1], "nothing hung")
}
