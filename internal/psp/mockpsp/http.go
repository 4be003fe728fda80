package mockpsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// maxRequestBytes bounds request bodies; every endpoint takes a few fields.
const maxRequestBytes = 64 << 10

// maxKeyLength is the longest Idempotency-Key the mock accepts, as common
// PSPs do; the service's derived keys are far shorter.
const maxKeyLength = 255

var currencyPattern = regexp.MustCompile(`^[a-z]{3}$`)

func (m *Mock) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/authorizations", m.handleAuthorize)
	mux.HandleFunc("GET /v1/authorizations", m.handleLookup(opAuthorization))
	mux.HandleFunc("GET /_admin/authorizations", m.handleListAuthorizations)
	for _, kind := range []opKind{opCapture, opVoid, opRefund} {
		mux.HandleFunc("POST /v1/"+string(kind), m.handleOperation(kind))
		mux.HandleFunc("GET /v1/"+string(kind), m.handleLookup(kind))
		mux.HandleFunc("GET /_admin/"+string(kind), m.handleListOperations(kind))
	}
	mux.HandleFunc("GET /_admin/requests", m.handleListRequests)
	mux.HandleFunc("PUT /_admin/faults", m.handleSetFaults)
	mux.HandleFunc("GET /_admin/faults", m.handleGetFaults)
	return mux
}

// authorizeBody is the body of POST /v1/authorizations. It is comparable, so
// a replay is checked against the first request with ==, which ignores key
// order and white space.
type authorizeBody struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Reference     string `json:"reference"`
}

func (b authorizeBody) validate() error {
	switch {
	case b.Amount <= 0:
		return fmt.Errorf("amount %d: must be a positive integer", b.Amount)
	case !currencyPattern.MatchString(b.Currency):
		return fmt.Errorf("currency %q: must be a lower-case ISO 4217 code", b.Currency)
	case !strings.HasPrefix(b.PaymentMethod, "pm_") || len(b.PaymentMethod) == len("pm_"):
		return fmt.Errorf("payment_method %q: must be a pm_... token", b.PaymentMethod)
	case !strings.HasPrefix(b.Reference, "ch_") || len(b.Reference) == len("ch_"):
		return fmt.Errorf("reference %q: must be a charge id, starting with ch_", b.Reference)
	}
	return nil
}

func (m *Mock) handleAuthorize(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	ex := m.receive(r, key, "")

	body, code, err := parseAuthorize(w, r, key)
	if err != nil {
		ex.finish(w, r, outcome{status: http.StatusBadRequest, code: code, msg: err.Error()}, nil)
		return
	}
	ex.setReference(body.Reference)
	out := m.authorize(key, body, ex.faults)
	ex.finish(w, r, out, out.result)
}

// handleLookup serves GET ?reference= for kind: {"data": [...]}.
func (m *Mock) handleLookup(kind opKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ref := r.URL.Query().Get("reference")
		ex := m.receive(r, r.Header.Get("Idempotency-Key"), ref)
		if ref == "" {
			ex.finish(w, r, outcome{status: http.StatusBadRequest, code: "invalid_request", msg: "the reference query parameter is required"}, nil)
			return
		}
		out, found := m.lookup(kind, ref, ex.faults)
		ex.finish(w, r, out, struct {
			Data []any `json:"data"`
		}{found})
	}
}

// finish answers out after the injected latency (even a refusal is slow at
// a slow PSP), body being the answer of a 200, and logs the status sent.
func (ex *exchange) finish(w http.ResponseWriter, r *http.Request, out outcome, body any) {
	if !wait(r.Context(), ex.faults.latency()) {
		ex.answered(0) // the client left; what was done stays done
		return
	}
	switch {
	case out.status != http.StatusOK:
		writeError(w, out.status, out.code, out.msg)
		ex.answered(out.status)
	case out.drop:
		ex.answered(0)
		dropConnection(w)
	default:
		writeJSON(w, http.StatusOK, body)
		ex.answered(http.StatusOK)
	}
}

// parseAuthorize reads and checks a request; on failure it also returns the
// error code of the 400 answer.
func parseAuthorize(w http.ResponseWriter, r *http.Request, key string) (authorizeBody, string, error) {
	if code, err := checkKey(key); err != nil {
		return authorizeBody{}, code, err
	}
	var body authorizeBody
	if err := decodeJSON(w, r, &body); err != nil {
		return authorizeBody{}, "invalid_request", err
	}
	if err := body.validate(); err != nil {
		return authorizeBody{}, "invalid_request", err
	}
	return body, "", nil
}

// checkKey checks an Idempotency-Key header, returning the error code of
// the 400 answer with the error.
func checkKey(key string) (string, error) {
	switch {
	case key == "":
		return "idempotency_key_missing", errors.New("the Idempotency-Key header is required")
	case len(key) > maxKeyLength:
		return "invalid_request", fmt.Errorf("Idempotency-Key: longer than %d characters", maxKeyLength)
	}
	return "", nil
}

func (m *Mock) handleListAuthorizations(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Data []LedgerEntry `json:"data"`
	}{Data: m.Authorizations()})
}

func (m *Mock) handleListRequests(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Data []RequestEntry `json:"data"`
	}{Data: m.Requests()})
}

// handleGetFaults answers the mock's name, the faults in force and how many
// were injected (the last an extension of the contract's admin API, for
// chaos summaries).
func (m *Mock) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Name string `json:"name"`
		Faults
		Injected Injected `json:"injected"`
	}{m.name, m.Faults(), m.Injected()})
}

func (m *Mock) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	// Decoding into a zero Faults makes every field left out mean "off", so
	// {} resets all of them.
	var f Faults
	if err := decodeJSON(w, r, &f); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	if err := m.SetFaults(f); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, f)
}

// decodeJSON reads exactly one JSON object with no unknown fields: a mock
// that accepted anything would hide client bugs.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("body: a JSON object is required")
		}
		return fmt.Errorf("body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("body: unexpected data after the JSON object")
	}
	return nil
}

// wait sleeps for d unless the request is abandoned first; it reports
// whether anyone is still there to answer.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// dropConnection closes the connection without writing a byte of the
// answer, so the client cannot tell whether the request was processed.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 and recorders cannot be hijacked; aborting the handler is
		// net/http's own way to end a response without sending it.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only the package's own plain structs are encoded here.
		panic(fmt.Sprintf("mock psp: encode %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	type apiError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	writeJSON(w, status, struct {
		Error apiError `json:"error"`
	}{Error: apiError{Code: code, Message: msg}})
}
