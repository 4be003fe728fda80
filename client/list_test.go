package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// listServer answers GET /v1/charges and /v1/refunds?charge= over ids,
// newest first, with the contract's keyset pagination, as the API does.
func listServer(t *testing.T, ids []string, mod func(w http.ResponseWriter, r *http.Request, n int) bool) *fakeAPI {
	t.Helper()
	return newFakeAPI(t, nil, func(w http.ResponseWriter, r *http.Request, n int) {
		if mod != nil && mod(w, r, n) {
			return
		}
		q := r.URL.Query()
		limit := 10
		if v := q.Get("limit"); v != "" {
			limit, _ = strconv.Atoi(v)
		}
		start := 0
		if after := q.Get("starting_after"); after != "" {
			for i, id := range ids {
				if id == after {
					start = i + 1
				}
			}
		}
		end := min(start+limit, len(ids))
		data := []json.RawMessage{}
		for _, id := range ids[start:end] {
			if r.URL.Path == "/v1/refunds" {
				data = append(data, refundBody(id, q.Get("charge"), 10))
			} else {
				data = append(data, capturedBody(id, StatusAuthorized, 0))
			}
		}
		b, _ := json.Marshal(map[string]any{"object": "list", "data": data, "has_more": end < len(ids), "url": r.URL.Path})
		writeCharge(w, http.StatusOK, append(b, '\n'), false)
	})
}

func TestListChargesIteratesAllPages(t *testing.T) {
	t.Parallel()
	var ids []string
	for i := 7; i >= 1; i-- {
		ids = append(ids, fmt.Sprintf("ch_%d", i))
	}
	api := listServer(t, ids, func(w http.ResponseWriter, _ *http.Request, n int) bool {
		if n == 2 { // a page fetch that fails once is retried
			writeProblem(w, http.StatusServiceUnavailable, CodeDatabaseUnavailable, "", 0, nil)
			return true
		}
		return false
	})
	c := newTestClient(t, api.srv.URL, nil)

	var got []string
	for ch, err := range c.ListCharges(context.Background(), ListParams{Limit: 3}) {
		require.NoError(t, err)
		require.Equal(t, StatusAuthorized, ch.Status)
		require.NotEmpty(t, ch.RawBody, "each object's own bytes")
		got = append(got, ch.ID)
	}
	require.Equal(t, ids, got)

	var queries []string
	for _, r := range api.requests() {
		require.Equal(t, "/v1/charges", r.Path)
		require.Empty(t, r.Key)
		queries = append(queries, r.Query)
	}
	require.Equal(t, []string{"limit=3", "limit=3&starting_after=ch_5", "limit=3&starting_after=ch_5", "limit=3&starting_after=ch_2"}, queries)
}

func TestListStopsWhenTheCallerBreaks(t *testing.T) {
	t.Parallel()
	api := listServer(t, []string{"ch_3", "ch_2", "ch_1"}, nil)
	c := newTestClient(t, api.srv.URL, nil)
	for ch, err := range c.ListCharges(context.Background(), ListParams{Limit: 1}) {
		require.NoError(t, err)
		require.Equal(t, "ch_3", ch.ID)
		break
	}
	require.Len(t, api.requests(), 1, "no page is fetched past the break")
}

func TestListErrorsEndTheSequence(t *testing.T) {
	t.Parallel()

	t.Run("FinalError", func(t *testing.T) {
		t.Parallel()
		api := listServer(t, []string{"ch_2", "ch_1"}, func(w http.ResponseWriter, _ *http.Request, n int) bool {
			if n == 2 {
				writeProblem(w, http.StatusBadRequest, "invalid_request", "starting_after: no such charge", 0, nil)
				return true
			}
			return false
		})
		c := newTestClient(t, api.srv.URL, nil)
		var got []string
		var errs []error
		for ch, err := range c.ListCharges(context.Background(), ListParams{Limit: 1}) {
			if err != nil {
				require.Nil(t, ch)
				errs = append(errs, err)
				continue
			}
			got = append(got, ch.ID)
		}
		require.Equal(t, []string{"ch_2"}, got)
		require.Len(t, errs, 1, "the error is the last pair")
		require.ErrorIs(t, errs[0], ErrInvalidRequest)
	})

	t.Run("HasMoreWithEmptyPage", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, nil, func(w http.ResponseWriter, _ *http.Request, _ int) {
			writeCharge(w, http.StatusOK, []byte(`{"object":"list","data":[],"has_more":true,"url":"/v1/charges"}`), false)
		})
		c := newTestClient(t, api.srv.URL, nil)
		n := 0
		for _, err := range c.ListCharges(context.Background(), ListParams{}) {
			require.ErrorIs(t, err, errEndlessList)
			n++
		}
		require.Equal(t, 1, n)
		require.Len(t, api.requests(), 1)
	})

	t.Run("NotAList", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, nil, func(w http.ResponseWriter, _ *http.Request, _ int) {
			writeCharge(w, http.StatusOK, capturedBody("ch_1", StatusAuthorized, 0), false)
		})
		c := newTestClient(t, api.srv.URL, nil)
		_, err := c.ListChargesPage(context.Background(), ListParams{})
		require.ErrorIs(t, err, errProtocol)
		require.Len(t, api.requests(), 1, "a final answer in the wrong shape is not retried")
	})
}

func TestListRefundsOfACharge(t *testing.T) {
	t.Parallel()
	api := listServer(t, []string{"re_3", "re_2", "re_1"}, nil)
	c := newTestClient(t, api.srv.URL, nil)

	page, err := c.ListRefundsPage(context.Background(), "ch_1", ListParams{Limit: 2})
	require.NoError(t, err)
	require.True(t, page.HasMore)
	require.Equal(t, "list", page.Object)
	require.Len(t, page.Data, 2)
	require.Equal(t, "ch_1", page.Data[0].Charge)
	require.NotEmpty(t, page.RawBody)

	var got []string
	for r, err := range c.ListRefunds(context.Background(), "ch_1", ListParams{Limit: 2, StartingAfter: "re_3"}) {
		require.NoError(t, err)
		got = append(got, r.ID)
	}
	require.Equal(t, []string{"re_2", "re_1"}, got)
	for _, r := range api.requests() {
		require.Equal(t, "/v1/refunds", r.Path)
	}
	require.Equal(t, "charge=ch_1&limit=2", api.requests()[0].Query)
	require.Equal(t, "charge=ch_1&limit=2&starting_after=re_3", api.requests()[1].Query)

	for _, err := range c.ListRefunds(context.Background(), "", ListParams{}) {
		require.ErrorContains(t, err, "empty charge id")
	}
	require.Len(t, api.requests(), 2, "no request without a charge")
}
