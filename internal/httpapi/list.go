package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// Pagination limits of every list endpoint.
const (
	listLimitDefault = 10
	listLimitMax     = 100
)

var errListParams = errors.New("invalid list parameters")

// listParams are the keyset pagination parameters every list takes:
// ?limit=1..100 (default 10) and ?starting_after=<id of the last object of
// the previous page>.
type listParams struct {
	Limit         int
	StartingAfter string
}

func parseListParams(r *http.Request) (listParams, error) {
	p := listParams{Limit: listLimitDefault, StartingAfter: r.URL.Query().Get("starting_after")}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > listLimitMax {
			return listParams{}, &paramError{name: "limit", msg: "must be an integer from 1 to 100"}
		}
		p.Limit = n
	}
	return p, nil
}

// paramError is a bad query parameter (400 invalid_request).
type paramError struct{ name, msg string }

func (e *paramError) Error() string { return e.name + ": " + e.msg }
func (e *paramError) Unwrap() error { return errListParams }

// listBody is a page of a list: {"object":"list","data":[…],"has_more":…,"url":…}.
type listBody struct {
	Object  string `json:"object"`
	Data    []any  `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

// writeList answers a page. items holds up to limit+1 objects, newest
// first: the one past limit, if fetched, only says that there is more.
func writeList[T any](w http.ResponseWriter, url string, items []T, limit int) {
	page := listBody{Object: "list", Data: []any{}, URL: url}
	if len(items) > limit {
		items, page.HasMore = items[:limit], true
	}
	for _, it := range items {
		page.Data = append(page.Data, it)
	}
	writeJSON(w, http.StatusOK, page)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain data only: cannot fail
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
