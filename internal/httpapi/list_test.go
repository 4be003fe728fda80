package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// page is one page of a list.
type page struct {
	Object  string   `json:"object"`
	Data    []object `json:"data"`
	HasMore bool     `json:"has_more"`
	URL     string   `json:"url"`
}

func decodePage(t *testing.T, r reply) page {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var p page
	require.NoError(t, json.Unmarshal(r.body, &p), "%s", r.body)
	require.Equal(t, "list", p.Object)
	return p
}

// pageThrough reads a list to its end, limit objects a page, calling
// between before each page after the first, and returns the ids in the
// order the pages gave them.
func (b *apiBundle) pageThrough(t *testing.T, path string, limit int, between func()) []string {
	t.Helper()
	var ids []string
	after := ""
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	for n := 0; ; n++ {
		require.Less(t, n, 10000, "the list never ends")
		q := fmt.Sprintf("%s%slimit=%d", path, sep, limit)
		if after != "" {
			between()
			q += "&starting_after=" + after
		}
		p := decodePage(t, b.do(t, http.MethodGet, q, "", ""))
		require.LessOrEqual(t, len(p.Data), limit)
		for _, o := range p.Data {
			ids = append(ids, o.ID)
		}
		if !p.HasMore {
			return ids
		}
		require.Len(t, p.Data, limit, "a page with more after it is full")
		after = p.Data[len(p.Data)-1].ID
	}
}

// Pitfall: a list paged while charges are being created. An offset shifts
// under every insert above it (a charge shown twice, another never), and a
// cursor on created_at alone skips or repeats charges that share one
// created_at (one transaction, or a clock that stands still). Goroutines
// create charges through the API while a client pages through GET
// /v1/charges, a few per page at random places in the order (with a clock
// that stands still, every charge ties on created_at and only its random
// id orders it); one more charge is inserted in a transaction begun before
// the first page and committed in the middle, with a created_at older than
// most. Every charge committed before the first page was read must appear
// exactly once, none twice, and the pages in order.
func TestChargeListHasNoGapsOrDuplicatesUnderConcurrentInserts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		clock time.Time
	}{
		{"clock standing still", time.Now().UTC().Truncate(time.Second)},
		{"real clock", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testListUnderInserts(t, setupAPI(t, tc.clock))
		})
	}
}

func testListUnderInserts(t *testing.T, b *apiBundle) {
	ctx := t.Context()
	// Thirty charges in one transaction share created_at whatever the
	// clock; twenty more through the API.
	_, err := b.pool.Exec(ctx, `INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at,
	    amount, currency, payment_method, status)
	  SELECT $1, 'ch_seed' || lpad(i::text, 4, '0'), 'seed' || i, now(), 1000, 'usd', 'pm_card_visa', 'authorized'
	    FROM generate_series(1, 30) i`, b.tenant.ID)
	require.NoError(t, err)
	for i := range 20 {
		b.authorize(t, fmt.Sprintf("before-%d", i))
	}

	// The late one: its transaction starts now (its created_at), it
	// commits after the first pages.
	late, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = late.Rollback(context.Background()) }()
	_, err = late.Exec(ctx, `INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at,
	    amount, currency, payment_method, status) VALUES ($1, 'ch_late', 'late', now(), 1000, 'usd', 'pm_card_visa', 'authorized')`,
		b.tenant.ID)
	require.NoError(t, err)

	// Inserters, running from before the snapshot to after the last page.
	var (
		created atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		errs    = make(chan error, 4)
	)
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := b.call(context.Background(), b.key, http.MethodPost, "/v1/charges", fmt.Sprintf("during-%d-%d", w, i),
					`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`)
				if err == nil && r.status != http.StatusCreated {
					err = fmt.Errorf("create: %d %s", r.status, r.body)
				}
				if err != nil {
					errs <- err
					return
				}
				created.Add(1)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	waitCreated := func(n int64) {
		t.Helper()
		require.Eventually(t, func() bool { return created.Load() >= n }, 20*time.Second, time.Millisecond,
			"the inserters stopped creating")
	}
	waitCreated(3)

	// Every charge committed before the first page is read.
	rows, err := b.pool.Query(ctx, `SELECT id FROM charges WHERE tenant_id = $1`, b.tenant.ID)
	require.NoError(t, err)
	before := map[string]bool{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		before[id] = true
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(before), 53)

	pages := 0
	ids := b.pageThrough(t, "/v1/charges", 4, func() {
		pages++
		// Some new charges between every two pages.
		waitCreated(created.Load() + 2)
		if pages == 3 {
			require.NoError(t, late.Commit(ctx))
		}
	})
	select {
	case err := <-errs:
		require.NoError(t, err)
	default:
	}

	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	for id, n := range seen {
		require.Equal(t, 1, n, "charge %s on %d pages", id, n)
	}
	for id := range before {
		require.Equal(t, 1, seen[id], "charge %s, committed before the first page, is missing", id)
	}
	require.Greater(t, pages, 10, "the inserts ran between pages")
	// And the pages are in the list's order.
	var ordered bool
	require.NoError(t, b.pool.QueryRow(ctx, `
	    SELECT bool_and(prev IS NULL OR (c.created_at, c.id) < prev)
	      FROM (SELECT c.created_at, c.id, lag((c.created_at, c.id)) OVER (ORDER BY o.n) AS prev
	              FROM unnest($2::text[]) WITH ORDINALITY o(id, n)
	              JOIN charges c ON c.tenant_id = $1 AND c.id = o.id) c`, b.tenant.ID, ids).Scan(&ordered))
	require.True(t, ordered, "pages out of order: %v", ids)
}

// The list parameters and shape, on GET /v1/charges and GET /v1/refunds.
func TestListParameters(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	id := b.authorize(t, "a")
	b.capture(t, id)
	var refunds []string
	for i := range 3 {
		r := b.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf("r%d", i), `{"charge":"`+id+`","amount":100}`)
		refunds = append(refunds, requireStatus(t, r, http.StatusCreated, "").ID)
	}
	other := b.authorize(t, "b")

	p := decodePage(t, b.do(t, http.MethodGet, "/v1/charges", "", ""))
	require.Equal(t, "/v1/charges", p.URL)
	require.False(t, p.HasMore)
	require.Len(t, p.Data, 2)
	require.ElementsMatch(t, []string{id, other}, []string{p.Data[0].ID, p.Data[1].ID})

	got := b.pageThrough(t, "/v1/refunds?charge="+id, 2, func() {})
	require.ElementsMatch(t, refunds, got)
	p = decodePage(t, b.do(t, http.MethodGet, "/v1/refunds?charge="+other, "", ""))
	require.Empty(t, p.Data)
	require.Equal(t, "/v1/refunds", p.URL)
	p = decodePage(t, b.do(t, http.MethodGet, "/v1/refunds?limit=1", "", ""))
	require.True(t, p.HasMore)
	require.Equal(t, "refund", p.Data[0].Object)

	for _, path := range []string{"/v1/charges?limit=0", "/v1/charges?limit=101", "/v1/refunds?limit=x"} {
		requireStatus(t, b.do(t, http.MethodGet, path, "", ""), http.StatusBadRequest, "invalid_request")
	}
	for _, path := range []string{"/v1/charges?starting_after=ch_unknown", "/v1/refunds?starting_after=re_unknown",
		"/v1/refunds?charge=ch_unknown", "/v1/refunds?charge=" + id + "&starting_after=re_unknown"} {
		requireStatus(t, b.do(t, http.MethodGet, path, "", ""), http.StatusNotFound, "not_found")
	}
	// Another tenant sees none of it, and cannot page from it.
	p = decodePage(t, b.asOther(t, http.MethodGet, "/v1/charges", "", ""))
	require.Empty(t, p.Data)
	p = decodePage(t, b.asOther(t, http.MethodGet, "/v1/refunds", "", ""))
	require.Empty(t, p.Data)
	requireStatus(t, b.asOther(t, http.MethodGet, "/v1/charges?starting_after="+id, "", ""), http.StatusNotFound, "not_found")
}
