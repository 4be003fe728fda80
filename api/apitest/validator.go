// Package apitest checks real HTTP exchanges with bin/api against the OpenAPI
// document in package api, so black-box tests catch any drift between the
// service and its published contract.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/phasepay/phasepay/api"
)

// Validator checks requests and responses against the OpenAPI document. It
// holds no per-exchange state and is safe for concurrent use by parallel
// tests.
type Validator struct {
	router routers.Router
}

// New loads and validates the OpenAPI document and builds a router over it.
func New() (*Validator, error) {
	doc, err := api.Load()
	if err != nil {
		return nil, fmt.Errorf("new validator: %w", err)
	}

	// The document names the default API_ADDR as its server, but tests run
	// the service on whatever 127.0.0.1:PORT is free. A router with servers
	// only matches URLs under one of them; with none it matches on the path
	// alone, which is what an address-independent check needs.
	doc.Servers = nil

	// The legacy router rather than gorillamux: it needs no extra module and
	// reports "path not found" and "method not allowed" distinctly.
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("new validator: build router: %w", err)
	}
	return &Validator{router: router}, nil
}

// Check validates one real exchange. The request is used only to find the
// documented operation (path and method), never validated itself: tests
// deliberately send invalid requests, such as one without Idempotency-Key,
// to see the 400. The response must then conform to that operation: a
// documented status, a documented Content-Type, every header declared as
// required present and valid, and a body that matches the schema.
//
// reqBody is taken so callers hand over the whole exchange, but Check does
// not validate it; CheckRequest does, for requests meant to be valid.
// resp.Body is ignored: the caller has already read it into respBody.
func (v *Validator) Check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) error {
	route, pathParams, err := v.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("check %s %s: operation not in openapi.yaml: %w", req.Method, req.URL.Path, err)
	}

	opts := &openapi3filter.Options{
		// Without it an undocumented status passes silently.
		IncludeResponseStatus: true,
		// Report every violation at once, not just the first.
		MultiError: true,
	}
	opts.WithCustomSchemaErrorFunc(schemaErrorMessage)
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    req,
			PathParams: pathParams,
			Route:      route,
		},
		Status:  resp.StatusCode,
		Header:  resp.Header,
		Body:    io.NopCloser(bytes.NewReader(respBody)),
		Options: opts,
	}
	// application/problem+json and text/plain are among kin-openapi's
	// default body decoders, so no decoder is registered here: that would
	// change global state under parallel tests.
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		return fmt.Errorf("check %s %s -> %d: response does not conform to openapi.yaml: %w",
			req.Method, req.URL.Path, resp.StatusCode, err)
	}
	if err := checkProblemCode(route.Operation, resp.StatusCode, resp.Header, respBody); err != nil {
		return fmt.Errorf("check %s %s -> %d: %w", req.Method, req.URL.Path, resp.StatusCode, err)
	}
	return nil
}

// checkProblemCode holds the service to the problem codes the document
// lists for a response. The document publishes codes as an open set
// (x-extensible-enum, not enum), so that clients accept codes added later;
// the service of this version, though, must send only the codes it lists,
// and only under the status that lists them.
func checkProblemCode(op *openapi3.Operation, status int, h http.Header, body []byte) error {
	if status < 400 || !strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") {
		return nil
	}
	ref := op.Responses.Status(status)
	if ref == nil || ref.Value == nil {
		return nil // ValidateResponse reported it
	}
	mt := ref.Value.Content.Get("application/problem+json")
	if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
		return nil
	}
	known := extensibleEnum(mt.Schema.Value)
	var p struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("problem body: %w", err)
	}
	if len(known) == 0 {
		return fmt.Errorf("problem code %q: the document lists no codes for this response", p.Code)
	}
	for _, c := range known {
		if c == p.Code {
			return nil
		}
	}
	return fmt.Errorf("problem code %q is not among the codes openapi.yaml lists for this response %v", p.Code, known)
}

// extensibleEnum returns the x-extensible-enum of the schema's code
// member: that of a narrowing allOf part where there is one, else that of
// the Problem schema itself.
func extensibleEnum(s *openapi3.Schema) []string {
	var narrowed, base []string
	for _, part := range s.AllOf {
		if part.Value == nil {
			continue
		}
		codes := codeEnum(part.Value)
		if part.Ref != "" {
			base = append(base, codes...)
		} else {
			narrowed = append(narrowed, codes...)
		}
	}
	if own := codeEnum(s); len(own) > 0 {
		base = append(base, own...)
	}
	if len(narrowed) > 0 {
		return narrowed
	}
	return base
}

func codeEnum(s *openapi3.Schema) []string {
	code := s.Properties["code"]
	if code == nil || code.Value == nil {
		return nil
	}
	list, _ := code.Value.Extensions["x-extensible-enum"].([]any)
	out := make([]string, 0, len(list))
	for _, v := range list {
		if c, ok := v.(string); ok {
			out = append(out, c)
		}
	}
	return out
}

// CheckRequest validates a request, body included, against its documented
// operation. Use it on requests a test expects the service to accept, so
// the test's own fixtures are held to the published contract too; it is not
// called by Check because tests also send invalid requests on purpose.
// Authentication is not checked: the bearer key's validity is the service's
// business, not the document's.
func (v *Validator) CheckRequest(req *http.Request, reqBody []byte) error {
	route, pathParams, err := v.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("check request %s %s: operation not in openapi.yaml: %w", req.Method, req.URL.Path, err)
	}

	// Validate a clone with its own body: the caller's request may already
	// have been sent, its body drained.
	clone := req.Clone(context.Background())
	clone.Body = io.NopCloser(bytes.NewReader(reqBody))
	clone.ContentLength = int64(len(reqBody))

	opts := &openapi3filter.Options{
		MultiError:         true,
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	}
	opts.WithCustomSchemaErrorFunc(schemaErrorMessage)
	input := &openapi3filter.RequestValidationInput{
		Request:    clone,
		PathParams: pathParams,
		Route:      route,
		Options:    opts,
	}
	if err := openapi3filter.ValidateRequest(context.Background(), input); err != nil {
		return fmt.Errorf("check request %s %s: does not conform to openapi.yaml: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// maxValueInMessage bounds how much of an offending value an error quotes.
const maxValueInMessage = 200

// schemaErrorMessage renders a schema violation as one line: where, why and
// the offending value. kin-openapi's default message dumps the whole schema,
// which buries the one line that matters in a failing end-to-end test.
func schemaErrorMessage(err *openapi3.SchemaError) string {
	where := "/" + strings.Join(err.JSONPointer(), "/")
	if err.Origin != nil {
		// A nested failure (allOf, a format validator) explains itself
		// better than the wrapper does; nested schema errors name their
		// own paths.
		if where == "/" {
			return err.Origin.Error()
		}
		return fmt.Sprintf("at %q: %s", where, err.Origin.Error())
	}
	value, _ := json.Marshal(err.Value)
	if len(value) > maxValueInMessage {
		value = append(value[:maxValueInMessage], "..."...)
	}
	return fmt.Sprintf("at %q: %s (got %s)", where, err.Reason, value)
}
