package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/url"
	"strconv"
)

// ListParams pages through a list. Lists are newest first and cut at an
// object, not an offset, so objects created while a caller pages through
// neither shift nor repeat what it sees.
type ListParams struct {
	// Limit is the page size, 1 to 100; 0 leaves it to the server (10).
	// The iterators fetch pages of this size for as long as the caller
	// ranges.
	Limit int
	// StartingAfter is the id of the object the list starts after (the
	// last one of a previous page); "" starts with the newest.
	StartingAfter string
}

// Page is one page of a list: {"object":"list","data":[…],"has_more":…,"url":…}.
type Page[T any] struct {
	Object string `json:"object"`
	// Data holds the page's objects, newest first; each one's RawBody is
	// its JSON exactly as received.
	Data []T `json:"data"`
	// HasMore says that objects older than the last of Data exist: pass
	// the last one's id as the next page's StartingAfter.
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`

	// RawBody is the page exactly as received.
	RawBody []byte `json:"-"`
}

// listable is an object a list holds: a *Charge or a *Refund.
type listable interface {
	answer
	objectID() string
}

func (ch *Charge) objectID() string { return ch.ID }
func (r *Refund) objectID() string  { return r.ID }

// page decodes one page of T; newT returns a fresh object to decode an
// item into (Go cannot allocate the T of a pointer type parameter).
type page[T listable] struct {
	p    Page[T]
	newT func() T
}

func (pg *page[T]) decode(raw []byte, _ bool) bool {
	var wire struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
		URL     string            `json:"url"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil || wire.Object != "list" || wire.Data == nil {
		return false
	}
	pg.p = Page[T]{Object: wire.Object, Data: make([]T, 0, len(wire.Data)), HasMore: wire.HasMore, URL: wire.URL, RawBody: raw}
	for _, item := range wire.Data {
		v := pg.newT()
		if !v.decode(item, false) {
			return false
		}
		pg.p.Data = append(pg.p.Data, v)
	}
	return true
}

func (*page[T]) kind() string { return "a list" }

// ListChargesPage reads one page of the tenant's charges. Errors:
// ErrInvalidRequest (a limit out of range), ErrUnauthorized as *Error;
// ErrGaveUp; ctx's error.
func (c *Client) ListChargesPage(ctx context.Context, p ListParams) (*Page[*Charge], error) {
	return listPage(ctx, c, "charges", nil, p, func() *Charge { return &Charge{} })
}

// ListCharges ranges over the tenant's charges, newest first, fetching
// pages of p.Limit as the caller goes; breaking out of the loop fetches no
// more. An error ends the sequence: it is the last pair yielded, with a
// nil charge.
//
//	for ch, err := range c.ListCharges(ctx, client.ListParams{Limit: 100}) {
//		if err != nil { return err }
//		…
//	}
func (c *Client) ListCharges(ctx context.Context, p ListParams) iter.Seq2[*Charge, error] {
	return listAll(ctx, c, "charges", nil, p, func() *Charge { return &Charge{} })
}

// ListRefundsPage reads one page of a charge's refunds. Errors: those of
// ListChargesPage, and ErrNotFound for a charge the tenant does not have.
func (c *Client) ListRefundsPage(ctx context.Context, chargeID string, p ListParams) (*Page[*Refund], error) {
	if err := checkID("charge", chargeID); err != nil {
		return nil, fmt.Errorf("list refunds: %w", err)
	}
	return listPage(ctx, c, "refunds", url.Values{"charge": {chargeID}}, p, func() *Refund { return &Refund{} })
}

// ListRefunds ranges over a charge's refunds, newest first, like
// ListCharges.
func (c *Client) ListRefunds(ctx context.Context, chargeID string, p ListParams) iter.Seq2[*Refund, error] {
	if err := checkID("charge", chargeID); err != nil {
		return func(yield func(*Refund, error) bool) { yield(nil, fmt.Errorf("list refunds: %w", err)) }
	}
	return listAll(ctx, c, "refunds", url.Values{"charge": {chargeID}}, p, func() *Refund { return &Refund{} })
}

func listPage[T listable](ctx context.Context, c *Client, collection string, q url.Values, p ListParams, newT func() T) (*Page[T], error) {
	if p.Limit < 0 {
		return nil, fmt.Errorf("list %s: negative limit %d", collection, p.Limit)
	}
	u := c.base.JoinPath("v1", collection)
	// A copy: an iterator ranged twice must not share its query.
	q = maps.Clone(q)
	if q == nil {
		q = url.Values{}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.StartingAfter != "" {
		q.Set("starting_after", p.StartingAfter)
	}
	u.RawQuery = q.Encode()
	pg := &page[T]{newT: newT}
	if err := c.read(ctx, u.String(), pg); err != nil {
		return nil, fmt.Errorf("list %s: %w", collection, err)
	}
	return &pg.p, nil
}

// errEndlessList guards against a server that says has_more with an empty
// page: following it would ask for the same page for ever.
var errEndlessList = errors.New("has_more with an empty page")

func listAll[T listable](ctx context.Context, c *Client, collection string, q url.Values, p ListParams, newT func() T) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		for {
			pg, err := listPage(ctx, c, collection, q, p, newT)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, item := range pg.Data {
				if !yield(item, nil) {
					return
				}
			}
			if !pg.HasMore {
				return
			}
			if len(pg.Data) == 0 {
				yield(zero, fmt.Errorf("list %s: %w", collection, errEndlessList))
				return
			}
			p.StartingAfter = pg.Data[len(pg.Data)-1].objectID()
		}
	}
}
