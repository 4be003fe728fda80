package stripestandin

import (
	"net/http"
	"net/url"
	"time"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

// paymentIntent is a PaymentIntent as Stripe answers it (the fields
// stripe-go reads that phasepay uses).
type paymentIntent struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Amount           int64             `json:"amount"`
	AmountCapturable int64             `json:"amount_capturable"`
	AmountReceived   int64             `json:"amount_received"`
	CaptureMethod    string            `json:"capture_method"`
	Currency         string            `json:"currency"`
	PaymentMethod    string            `json:"payment_method"`
	Status           string            `json:"status"`
	Metadata         map[string]string `json:"metadata"`
	LastPaymentError map[string]any    `json:"last_payment_error"`
	Created          int64             `json:"created"`

	visibleAt time.Time // when search shows it
	ledger    int       // its entry in the ledger
}

// refundObj is a Refund as Stripe answers it.
type refundObj struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentIntent string            `json:"payment_intent"`
	Status        string            `json:"status"`
	Metadata      map[string]string `json:"metadata"`
	Created       int64             `json:"created"`
}

func invalid(code, msg string) executed {
	return executed{status: http.StatusBadRequest, body: stripeError("invalid_request_error", code, msg)}
}

func missing(id string) executed {
	return executed{status: http.StatusNotFound, body: stripeError("invalid_request_error", "resource_missing", "No such payment_intent: '"+id+"'")}
}

// createPaymentIntent is POST /v1/payment_intents, created and confirmed
// with manual capture: pm_card_chargeDeclined declines (402 card_error,
// the PaymentIntent requires_payment_method), any other pm_… authorizes
// (requires_capture).
func (s *Server) createPaymentIntent(w http.ResponseWriter, r *http.Request) {
	s.idempotent(w, r, func(f url.Values) string { return f.Get("metadata[phasepay_charge]") }, func(f url.Values) executed {
		amount, ok := formInt(f, "amount")
		switch {
		case !ok || amount <= 0:
			return invalid("parameter_invalid_integer", "amount: a positive integer is required")
		case len(f.Get("currency")) != 3:
			return invalid("parameter_missing", "currency is required")
		case len(f.Get("payment_method")) <= len("pm_"):
			return invalid("parameter_missing", "payment_method is required")
		}
		now := s.cfg.Now()
		pi := &paymentIntent{ID: s.nextID("pi"), Object: "payment_intent", Amount: amount, CaptureMethod: f.Get("capture_method"),
			Currency: f.Get("currency"), PaymentMethod: f.Get("payment_method"), Metadata: metadata(f), Created: now.Unix(),
			visibleAt: now}
		if s.cfg.SearchLag > 0 {
			pi.visibleAt = now.Add(time.Duration(s.rnd.Int64N(int64(s.cfg.SearchLag))))
		}
		entry := mockpsp.LedgerEntry{ID: pi.ID, IdempotencyKey: r.Header.Get("Idempotency-Key"), Reference: pi.Metadata["phasepay_charge"],
			Amount: amount, Currency: pi.Currency, Attempts: 1}
		s.pis[pi.ID], s.piOrder = pi, append(s.piOrder, pi.ID)
		pi.ledger = len(s.ledger)
		if pi.PaymentMethod == "pm_card_chargeDeclined" {
			pi.Status = "requires_payment_method"
			pi.LastPaymentError = map[string]any{"type": "card_error", "code": "card_declined", "decline_code": "generic_decline", "message": "Your card was declined."}
			entry.Status = psp.StatusDeclined
			s.ledger = append(s.ledger, entry)
			e := stripeError("card_error", "card_declined", "Your card was declined.")
			e["error"].(map[string]any)["decline_code"] = "generic_decline"
			e["error"].(map[string]any)["payment_intent"] = pi
			return executed{status: http.StatusPaymentRequired, body: e}
		}
		pi.Status, pi.AmountCapturable = "requires_capture", amount
		entry.Status = psp.StatusAuthorized
		s.ledger = append(s.ledger, entry)
		return executed{status: http.StatusOK, body: *pi}
	})
}

// searchPaymentIntents is GET /v1/payment_intents/search: only the
// PaymentIntents search shows yet.
func (s *Server) searchPaymentIntents(w http.ResponseWriter, r *http.Request) {
	m := searchQueryRE.FindStringSubmatch(r.URL.Query().Get("query"))
	ref := ""
	if m != nil {
		ref = m[2]
	}
	s.lookup(w, r, ref, func() executed {
		if m == nil {
			return invalid("parameter_invalid", "the stand-in searches metadata['key']:'value' only")
		}
		now := s.cfg.Now()
		data := []paymentIntent{}
		for _, id := range s.piOrder {
			pi := s.pis[id]
			if pi.Metadata[m[1]] == m[2] && !now.Before(pi.visibleAt) {
				data = append(data, *pi)
			}
		}
		return executed{status: http.StatusOK, body: map[string]any{"object": "search_result", "url": "/v1/payment_intents/search",
			"has_more": false, "next_page": nil, "data": data}}
	})
}

// retrievePaymentIntent is GET /v1/payment_intents/{id}: consistent.
func (s *Server) retrievePaymentIntent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	ref := ""
	if pi := s.pis[id]; pi != nil {
		ref = pi.Metadata["phasepay_charge"]
	}
	s.mu.Unlock()
	s.lookup(w, r, ref, func() executed {
		pi := s.pis[id]
		if pi == nil {
			return missing(id)
		}
		return executed{status: http.StatusOK, body: *pi}
	})
}

// chargeOf names a PaymentIntent's charge for the request log.
func (s *Server) chargeOf(id string) func(url.Values) string {
	return func(url.Values) string {
		if pi := s.pis[id]; pi != nil {
			return pi.Metadata["phasepay_charge"]
		}
		return ""
	}
}

// capturePaymentIntent is POST /v1/payment_intents/{id}/capture: once, of
// a requires_capture PaymentIntent, at most its capturable amount.
func (s *Server) capturePaymentIntent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.idempotent(w, r, s.chargeOf(id), func(f url.Values) executed {
		pi := s.pis[id]
		if pi == nil {
			return missing(id)
		}
		amount, ok := formInt(f, "amount_to_capture")
		if !ok {
			amount = pi.AmountCapturable
		}
		switch {
		case pi.Status != "requires_capture":
			return invalid("payment_intent_unexpected_state", "This PaymentIntent could not be captured because it has a status of "+pi.Status+".")
		case amount <= 0 || amount > pi.AmountCapturable:
			return invalid("amount_too_large", "amount_to_capture exceeds the capturable amount")
		}
		pi.Status, pi.AmountReceived, pi.AmountCapturable = "succeeded", amount, 0
		s.captures = append(s.captures, mockpsp.OperationEntry{ID: pi.ID, IdempotencyKey: r.Header.Get("Idempotency-Key"),
			Reference: pi.Metadata["phasepay_charge"], Amount: amount, Currency: pi.Currency, Status: psp.StatusCaptured, Attempts: 1, Authorization: pi.ID})
		return executed{status: http.StatusOK, body: *pi}
	})
}

// cancelPaymentIntent is POST /v1/payment_intents/{id}/cancel: once, of a
// PaymentIntent not captured.
func (s *Server) cancelPaymentIntent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.idempotent(w, r, s.chargeOf(id), func(url.Values) executed {
		pi := s.pis[id]
		if pi == nil {
			return missing(id)
		}
		if pi.Status != "requires_capture" && pi.Status != "requires_payment_method" {
			return invalid("payment_intent_unexpected_state", "This PaymentIntent could not be canceled because it has a status of "+pi.Status+".")
		}
		released := pi.AmountCapturable
		pi.Status, pi.AmountCapturable = "canceled", 0
		s.voids = append(s.voids, mockpsp.OperationEntry{ID: pi.ID, IdempotencyKey: r.Header.Get("Idempotency-Key"),
			Reference: pi.Metadata["phasepay_charge"], Amount: released, Currency: pi.Currency, Status: psp.StatusVoided, Attempts: 1, Authorization: pi.ID})
		return executed{status: http.StatusOK, body: *pi}
	})
}

// createRefund is POST /v1/refunds: of a captured PaymentIntent, never
// past what it received.
func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	s.idempotent(w, r, func(f url.Values) string { return f.Get("metadata[phasepay_refund]") }, func(f url.Values) executed {
		id := f.Get("payment_intent")
		pi := s.pis[id]
		if pi == nil {
			return missing(id)
		}
		amount, ok := formInt(f, "amount")
		var refunded int64
		for _, re := range s.refunds {
			if re.PaymentIntent == id && re.Status == "succeeded" {
				refunded += re.Amount
			}
		}
		switch {
		case pi.Status != "succeeded":
			return invalid("charge_not_refundable", "This PaymentIntent has no captured charge to refund.")
		case !ok || amount <= 0 || refunded+amount > pi.AmountReceived:
			return invalid("amount_too_large", "Refund amount is greater than unrefunded amount on charge.")
		}
		re := &refundObj{ID: s.nextID("re"), Object: "refund", Amount: amount, Currency: pi.Currency, PaymentIntent: id,
			Status: "succeeded", Metadata: metadata(f), Created: s.cfg.Now().Unix()}
		s.refunds = append(s.refunds, re)
		s.refundsL = append(s.refundsL, mockpsp.OperationEntry{ID: re.ID, IdempotencyKey: r.Header.Get("Idempotency-Key"),
			Reference: re.Metadata["phasepay_refund"], Amount: amount, Currency: re.Currency, Status: psp.StatusRefunded, Attempts: 1, Authorization: id})
		return executed{status: http.StatusOK, body: *re}
	})
}

// listRefunds is GET /v1/refunds?payment_intent=: consistent.
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("payment_intent")
	s.lookup(w, r, "", func() executed {
		data := []refundObj{}
		for _, re := range s.refunds {
			if re.PaymentIntent == id {
				data = append(data, *re)
			}
		}
		return executed{status: http.StatusOK, body: map[string]any{"object": "list", "url": "/v1/refunds", "has_more": false, "data": data}}
	})
}
