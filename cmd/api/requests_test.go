package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testsignal"
)

// How requests that do not finish by themselves are seen and settled: the
// tenant's view of its keys (GET /v1/idempotency_keys) and the operator's
// commands (`api requests …`).

// cli runs the api command line against the bundle's database and PSP, as
// user "tester".
func (b *testBundle) cli(t *testing.T, pspURL string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return b.cliEnv(t, map[string]string{"PSP_URL": pspURL, "USER": "tester"}, args...)
}

// cliEnv runs the api command line against the bundle's database with env.
func (b *testBundle) cliEnv(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	env = maps.Clone(env)
	env["DATABASE_URL"] = b.dbURL
	var out, errOut bytes.Buffer
	code = run(args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

type keyDoc struct {
	Object         string  `json:"object"`
	Key            string  `json:"key"`
	Endpoint       string  `json:"endpoint"`
	State          string  `json:"state"`
	RecoveryPoint  string  `json:"recovery_point"`
	Attempts       int     `json:"attempts"`
	NextAttemptAt  *string `json:"next_attempt_at"`
	LastError      *string `json:"last_error"`
	ResponseStatus *int    `json:"response_status"`
	ObjectID       *string `json:"object_id"`
	CompletedAt    *string `json:"completed_at"`
}

func (b *testBundle) getKey(t *testing.T, key string) (int, keyDoc) {
	t.Helper()
	status, _, body := b.do(t, http.MethodGet, "/v1/idempotency_keys/"+url.PathEscape(key), nil, nil)
	var doc keyDoc
	if status == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, &doc))
	}
	return status, doc
}

// waitRetryAfter waits out a 503's Retry-After, as a client must: until
// key's next attempt is due by the database's clock, which decides it (the
// header rounds it up to whole seconds).
func waitRetryAfter(t *testing.T, b *testBundle, key string) {
	t.Helper()
	waitDB(t, b, `SELECT next_attempt_at <= now() FROM idempotency_keys WHERE key = $1`, key)
}

// waitDB waits until the query, given args, answers true.
func waitDB(t *testing.T, b *testBundle, query string, args ...any) {
	t.Helper()
	testsignal.WaitFor(t, 10*time.Second, func() bool {
		var ok bool
		require.NoError(t, b.pool.QueryRow(t.Context(), query, args...).Scan(&ok))
		return ok
	}, "never true: %s", query)
}

// A PSP outage answers 503 with the time the key's next attempt is due; a
// retry before then is told the same and calls nobody; a retry after it
// resumes the same charge.
func TestPSPOutageAnswersRetryAfterUntilDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "outage-1"

	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	first := b.post(t, key, visaBody)
	p := requireProblem(t, first, http.StatusServiceUnavailable, "psp_unavailable")
	requireRetryAfter(t, first)
	require.NotEmpty(t, p.Charge, "the 503 names the charge that exists")

	status, doc := b.getKey(t, key)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, keyDoc{Object: "idempotency_key", Key: key, Endpoint: "POST /v1/charges", State: "unfinished",
		RecoveryPoint: "charge_created", Attempts: 1, NextAttemptAt: doc.NextAttemptAt, LastError: doc.LastError,
		ObjectID: &p.Charge}, doc)
	require.NotNil(t, doc.NextAttemptAt)
	require.NotNil(t, doc.LastError)

	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))
	requests := len(b.psp.Requests())
	early := b.post(t, key, visaBody)
	ep := requireProblem(t, early, http.StatusServiceUnavailable, "psp_unavailable")
	requireRetryAfter(t, early)
	require.Equal(t, p.Charge, ep.Charge)
	require.Len(t, b.psp.Requests(), requests, "not due: the PSP is not called")

	waitRetryAfter(t, b, key)
	done := b.post(t, key, visaBody)
	require.Equal(t, http.StatusCreated, done.status, "body: %s", done.body)
	require.Equal(t, p.Charge, decodeCharge(t, done.body).ID)
	require.Len(t, b.psp.Authorizations(), 1)

	status, doc = b.getKey(t, key)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "completed", doc.State)
	require.Equal(t, http.StatusCreated, *doc.ResponseStatus)
	require.NotNil(t, doc.CompletedAt)
}

// The tenant lists its keys newest first, by state, a page at a time; it
// never sees another tenant's keys.
func TestTenantListsItsKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 5 {
		r := b.post(t, "list-"+strconv.Itoa(i), visaBody)
		require.Equal(t, http.StatusCreated, r.status)
	}
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	requireProblem(t, b.post(t, "list-outage", visaBody), http.StatusServiceUnavailable, "psp_unavailable")

	type page struct {
		Object  string   `json:"object"`
		Data    []keyDoc `json:"data"`
		HasMore bool     `json:"has_more"`
		URL     string   `json:"url"`
	}
	get := func(query string) page {
		status, _, body := b.do(t, http.MethodGet, "/v1/idempotency_keys"+query, nil, nil)
		require.Equal(t, http.StatusOK, status, "body: %s", body)
		var p page
		require.NoError(t, json.Unmarshal(body, &p))
		require.Equal(t, "list", p.Object)
		require.Equal(t, "/v1/idempotency_keys", p.URL)
		return p
	}
	var seen []string
	after := ""
	for {
		q := "?limit=2"
		if after != "" {
			q += "&starting_after=" + url.QueryEscape(after)
		}
		p := get(q)
		for _, d := range p.Data {
			seen = append(seen, d.Key)
		}
		if !p.HasMore {
			break
		}
		after = p.Data[len(p.Data)-1].Key
	}
	require.Equal(t, []string{"list-outage", "list-4", "list-3", "list-2", "list-1", "list-0"}, seen, "newest first, no gaps, no repeats")

	// A key may hold any visible ASCII, '/' included: its path is
	// percent-encoded. (Unchecked: the OpenAPI router matches decoded paths.)
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))
	require.Equal(t, http.StatusCreated, b.post(t, "order/7?x=1", visaBody).status)
	status, _, body := b.doUnchecked(t, http.MethodGet, "/v1/idempotency_keys/"+url.PathEscape("order/7?x=1"), nil, nil)
	require.Equal(t, http.StatusOK, status, "body: %s", body)
	require.Contains(t, string(body), `"key":"order/7?x=1"`)

	unfinished := get("?state=unfinished")
	require.Len(t, unfinished.Data, 1)
	require.Equal(t, "list-outage", unfinished.Data[0].Key)
	require.Len(t, get("?state=completed&limit=100").Data, 6)
	require.Len(t, get("?state=done&limit=100").Data, 6, "done is an alias of completed")
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))

	status, _, body = b.do(t, http.MethodGet, "/v1/idempotency_keys?state=bogus", nil, nil)
	require.Equal(t, http.StatusBadRequest, status, "body: %s", body)
	status, _, _ = b.do(t, http.MethodGet, "/v1/idempotency_keys?limit=101", nil, nil)
	require.Equal(t, http.StatusBadRequest, status)

	_, otherKey := newTenantKey(t, b.pool, "other")
	status, _, body = b.do(t, http.MethodGet, "/v1/idempotency_keys/list-0", map[string]string{"Authorization": "Bearer " + otherKey}, nil)
	require.Equal(t, http.StatusNotFound, status, "another tenant's key is not found: %s", body)
	status, _, body = b.do(t, http.MethodGet, "/v1/idempotency_keys", map[string]string{"Authorization": "Bearer " + otherKey}, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(body), `"data":[]`)
}

// TestGiveUpMovesToNeedsAttentionAndOperatorResolves: a request that stays
// unresolved past GIVE_UP_AFTER needs an operator: clients are told so (503
// payment_unresolved) and nothing is sent; the operator lists it, sees it,
// cannot settle it against the PSP's books, settles it as the PSP says, and
// the client's retry then replays the settled answer.
func TestGiveUpMovesToNeedsAttentionAndOperatorResolves(t *testing.T) {
	t.Parallel()
	var m *Main
	b := setup(t, func(mm *Main) { m = mm; mm.Config.GiveUpAfter = time.Millisecond })
	pspURL := m.MockPSPURL()
	const key = "stuck-1"

	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	first := b.post(t, key, visaBody)
	requireProblem(t, first, http.StatusServiceUnavailable, "payment_unresolved")
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))
	requests := len(b.psp.Requests())
	again := b.post(t, key, visaBody)
	requireProblem(t, again, http.StatusServiceUnavailable, "payment_unresolved")
	require.Len(t, b.psp.Requests(), requests, "needs_attention: the PSP is not called")
	_, doc := b.getKey(t, key)
	require.Equal(t, "needs_attention", doc.State)

	code, out, errOut := b.cli(t, pspURL, "requests", "list", "--state", "needs_attention", "--json")
	require.Zero(t, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 1)
	var listed map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &listed))
	require.Equal(t, "acme", listed["tenant"])
	require.Equal(t, key, listed["key"])
	require.Equal(t, "POST /v1/charges", listed["endpoint"])
	require.Equal(t, "needs_attention", listed["state"])
	require.Equal(t, "charge_created", listed["recovery_point"])
	require.EqualValues(t, 1, listed["failed_attempts"])
	require.EqualValues(t, 1, listed["attempts"], "the older name of failed_attempts")
	require.NotEmpty(t, listed["last_error"])
	for _, k := range []string{"next_attempt_at", "created_at"} {
		require.Contains(t, listed, k)
	}
	for _, completed := range []string{"completed", "done"} {
		code, out, errOut = b.cli(t, pspURL, "requests", "list", "--state", completed)
		require.Zero(t, code, errOut)
		require.NotContains(t, out, key)
	}

	// The PSP holds no authorization: succeeded contradicts it.
	code, _, errOut = b.cli(t, pspURL, "requests", "resolve", "acme", key, "--as", "succeeded", "--reason", "customer says paid")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "contradicts")
	require.Len(t, strings.Split(strings.TrimSpace(errOut), "\n"), 1, "one line: %q", errOut)
	_, doc = b.getKey(t, key)
	require.Equal(t, "needs_attention", doc.State, "a refused resolution changes nothing")

	code, out, errOut = b.cli(t, pspURL, "requests", "resolve", "acme", key, "--as", "failed", "--reason", "PSP outage, checked with PSP support", "--by", "ops-jane")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "resolved as failed")

	replay := b.post(t, key, visaBody)
	p := requireProblem(t, replay, http.StatusPaymentRequired, "payment_failed")
	require.Equal(t, "The payment failed: settled as failed by an operator.", p.Detail, "stable words, not the operator's reason")
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	status, _, body := b.do(t, http.MethodGet, "/v1/charges/"+p.Charge, nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "failed", decodeCharge(t, body).Status)
	require.Empty(t, b.psp.Authorizations())

	code, out, errOut = b.cli(t, pspURL, "requests", "show", "acme", key, "--json")
	require.Zero(t, code, errOut)
	var shown struct {
		State       string `json:"state"`
		LockVersion int64  `json:"lock_version"`
		Timeline    []struct {
			Kind, Operator, As, Detail string
			LockVersion                int64 `json:"lock_version"`
		} `json:"timeline"`
		Response    json.RawMessage `json:"response"`
		Charge      json.RawMessage `json:"charge"`
		Resolutions []struct {
			As, Reason, By string
			Forced         bool
			PSPSaid        *string `json:"psp_said"`
		} `json:"resolutions"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, "completed", shown.State)
	require.Contains(t, string(shown.Response), "payment_failed")
	require.Contains(t, string(shown.Charge), p.Charge)
	require.Len(t, shown.Resolutions, 1)
	require.Equal(t, "failed", shown.Resolutions[0].As)
	require.Equal(t, "ops-jane", shown.Resolutions[0].By)
	require.False(t, shown.Resolutions[0].Forced)
	require.NotNil(t, shown.Resolutions[0].PSPSaid)
	require.Equal(t, "PSP outage, checked with PSP support", shown.Resolutions[0].Reason, "the reason is the operator's")
	// Claimed at 1; the refused resolution took the key (2) and says so;
	// the resolution took it again (3).
	require.EqualValues(t, 3, shown.LockVersion)
	var acts []string
	for _, e := range shown.Timeline {
		switch e.Kind {
		case "resolution_refused", "resolved":
			acts = append(acts, fmt.Sprintf("%s %s %s %d", e.Kind, e.As, e.Operator, e.LockVersion))
		}
	}
	require.Equal(t, []string{"resolution_refused succeeded tester 2", "resolved failed ops-jane 3"}, acts)

	code, _, errOut = b.cli(t, pspURL, "requests", "resolve", "acme", key, "--as", "failed", "--reason", "again")
	require.Equal(t, 1, code, "a finished request cannot be resolved again")
	require.Contains(t, errOut, "does not need attention")
}

// An operator's retry makes one more attempt of a needs_attention request
// due at once; with the PSP back, the client's retry then finishes it.
func TestOperatorRetryMakesNextAttemptDue(t *testing.T) {
	t.Parallel()
	var m *Main
	b := setup(t, func(mm *Main) { m = mm; mm.Config.GiveUpAfter = time.Millisecond })
	const key = "stuck-2"
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	requireProblem(t, b.post(t, key, visaBody), http.StatusServiceUnavailable, "payment_unresolved")
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))

	code, out, errOut := b.cli(t, m.MockPSPURL(), "requests", "retry", "acme", key)
	require.Zero(t, code, errOut)
	require.Contains(t, out, "due now")
	done := b.post(t, key, visaBody)
	require.Equal(t, http.StatusCreated, done.status, "body: %s", done.body)
	require.Len(t, b.psp.Authorizations(), 1)

	code, _, errOut = b.cli(t, m.MockPSPURL(), "requests", "retry", "acme", key)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "finished")
	code, _, errOut = b.cli(t, m.MockPSPURL(), "requests", "retry", "acme", "no-such-key")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not found")
	code, _, _ = b.cli(t, m.MockPSPURL(), "requests", "retry", "no-such-tenant", key)
	require.Equal(t, 1, code)
	scanner := bufio.NewScanner(strings.NewReader(errOut))
	require.True(t, scanner.Scan())
}

// The operator's commands and the tenant's view name the states alike:
// `requests list --state X` accepts exactly what ?state=X accepts, and
// prints the state the tenant view shows.
func TestRequestStatesAreOneVocabulary(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, http.StatusCreated, b.post(t, "vocab-1", visaBody).status)
	for _, state := range []string{"in_progress", "unfinished", "needs_attention", "completed", "done"} {
		status, _, body := b.do(t, http.MethodGet, "/v1/idempotency_keys?state="+state, nil, nil)
		require.Equal(t, http.StatusOK, status, "?state=%s: %s", state, body)
		code, out, errOut := b.cli(t, "embedded", "requests", "list", "--state", state, "--json")
		require.Zero(t, code, "--state %s: %s", state, errOut)
		if state == "completed" || state == "done" {
			require.Contains(t, string(body), `"state":"completed"`)
			require.Contains(t, out, `"state":"completed"`)
		} else {
			require.Contains(t, string(body), `"data":[]`)
			require.Empty(t, out)
		}
	}
	// requests list -h explains the states in their order.
	at := -1
	for _, st := range idempotency.RequestStates() {
		i := strings.Index(requestsListCommand.help, string(st)+" (")
		require.Greater(t, i, at, "requests list -h explains %s, after the states before it", st)
		at = i
	}

	status, _, body := b.do(t, http.MethodGet, "/v1/idempotency_keys?state=started", nil, nil)
	require.Equal(t, http.StatusBadRequest, status, "the stored state is not a filter: %s", body)
	code, _, errOut := b.cli(t, "embedded", "requests", "list", "--state", "started")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "in_progress, unfinished, needs_attention, completed")
}

// `requests show` prints one field per line for a person, the stored
// answer and the charge included; --json prints the same as JSON.
func TestRequestsShowIsHumanReadable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.post(t, "show-1", visaBody)
	require.Equal(t, http.StatusCreated, r.status)
	id := decodeCharge(t, r.body).ID

	code, out, errOut := b.cli(t, "embedded", "requests", "show", "acme", "show-1")
	require.Zero(t, code, errOut)
	require.NotEqual(t, "{", out[:1], "not JSON: %s", out)
	lines := strings.Split(out, "\n")
	field := func(name string) string {
		t.Helper()
		for _, l := range lines {
			if rest, ok := strings.CutPrefix(l, name+" "); ok {
				return strings.TrimSpace(rest)
			}
		}
		require.Failf(t, "no line", "%q in:\n%s", name, out)
		return ""
	}
	require.Equal(t, "acme", field("tenant"))
	require.Equal(t, "show-1", field("key"))
	require.Equal(t, "POST /v1/charges", field("endpoint"))
	require.Equal(t, "completed", field("state"))
	require.Equal(t, "done", field("recovery point"))
	require.Equal(t, "201", field("stored answer"))
	require.Regexp(t, `^`+id+` authorized, 1000 usd, captured 0, refunded 0, at PSP default as auth_\w+$`, field("charge"))
	require.Equal(t, "0", field("resolutions"))
	require.Contains(t, out, "\n  {\n    \"id\": \""+id+"\",\n", "the stored answer, indented")
	// Values start in one column.
	for _, name := range []string{"key", "state", "recovery point", "stored answer", "charge"} {
		for _, l := range lines {
			if strings.HasPrefix(l, name+" ") {
				require.Equal(t, strings.Index(lines[0], "acme"), strings.Index(l, field(name)), "%q is aligned", l)
			}
		}
	}

	code, out, errOut = b.cli(t, "embedded", "requests", "show", "acme", "show-1", "--json")
	require.Zero(t, code, errOut)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, "completed", shown["state"])
	require.EqualValues(t, 201, shown["response_status"])
}

// `requests resolve` without --by records $USER, and with no $USER (a
// container) the account the command runs as: it never fails for want of
// a name.
func TestResolveWithoutByRecordsTheAccount(t *testing.T) {
	t.Parallel()
	var m *Main
	b := setup(t, func(mm *Main) { m = mm; mm.Config.GiveUpAfter = time.Millisecond })
	account, err := user.Current()
	require.NoError(t, err)
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	for _, key := range []string{"by-user", "by-account"} {
		requireProblem(t, b.post(t, key, visaBody), http.StatusServiceUnavailable, "payment_unresolved")
	}
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))

	for key, env := range map[string]map[string]string{
		"by-user":    {"PSP_URL": m.MockPSPURL(), "USER": "ops-sam"},
		"by-account": {"PSP_URL": m.MockPSPURL()},
	} {
		code, _, errOut := b.cliEnv(t, env, "requests", "resolve", "acme", key, "--as", "failed", "--reason", "no authorization at the PSP")
		require.Zero(t, code, "%s: %s", key, errOut)
	}
	for key, want := range map[string]string{"by-user": "ops-sam", "by-account": account.Username} {
		code, out, errOut := b.cli(t, m.MockPSPURL(), "requests", "show", "acme", key, "--json")
		require.Zero(t, code, errOut)
		var shown struct {
			Resolutions []struct{ By string } `json:"resolutions"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &shown))
		require.Len(t, shown.Resolutions, 1)
		require.Equal(t, want, shown.Resolutions[0].By, key)
	}
	code, out, errOut := b.cli(t, m.MockPSPURL(), "requests", "show", "acme", "by-user")
	require.Zero(t, code, errOut)
	require.Regexp(t, `\nresolutions +1\n  1\. \S+ as failed by ops-sam: no authorization at the PSP \(PSP: .+\)\n`, out)
}

// `requests list` prints a page at a time (--limit, default 100, as the
// console does), oldest first, and names the cursor of the next page on
// stderr; following the cursors lists every key once, none twice, also
// while new keys are claimed between pages.
func TestRequestsListPagesWithLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var keys []string
	for i := range 5 {
		key := fmt.Sprintf("page-%d", i)
		require.Equal(t, http.StatusCreated, b.post(t, key, visaBody).status)
		keys = append(keys, key)
	}
	var (
		seen  []string
		after []string
		pages int
	)
	for {
		args := append([]string{"requests", "list", "--tenant", "acme", "--limit", "2", "--json"}, after...)
		code, out, errOut := b.cli(t, "embedded", args...)
		require.Zero(t, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.LessOrEqual(t, len(lines), 2, "a page holds --limit requests at most")
		for _, line := range lines {
			var r struct{ Key string }
			require.NoError(t, json.Unmarshal([]byte(line), &r))
			seen = append(seen, r.Key)
		}
		pages++
		if pages == 1 {
			// A key claimed between pages sorts after them (oldest first)
			// and shifts nothing already listed.
			require.Equal(t, http.StatusCreated, b.post(t, "page-late", visaBody).status)
			keys = append(keys, "page-late")
		}
		m := regexp.MustCompile(`--after '([^']+)'`).FindStringSubmatch(errOut)
		if m == nil {
			require.Empty(t, strings.TrimSpace(errOut))
			break
		}
		after = []string{"--after", m[1]}
	}
	require.Equal(t, keys, seen, "every key once, oldest first")
	require.Equal(t, 3, pages)

	code, _, errOut := b.cli(t, "embedded", "requests", "list", "--limit", "0")
	require.Equal(t, 2, code, errOut)
	code, _, errOut = b.cli(t, "embedded", "requests", "list", "--after", "yesterday")
	require.Equal(t, 2, code, errOut)
}
