package psp

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// OperationKind names a capture, void or refund as its endpoint does
// (POST /v1/captures, /v1/voids, /v1/refunds).
type OperationKind string

// The operations on an authorization.
const (
	KindCapture OperationKind = "captures"
	KindVoid    OperationKind = "voids"
	KindRefund  OperationKind = "refunds"
)

// success is the status of a done operation of kind.
// Call names the operation as Outcome.Call does: capture, void, refund.
func (k OperationKind) Call() string { return strings.TrimSuffix(string(k), "s") }

func (k OperationKind) success() string {
	switch k {
	case KindCapture:
		return StatusCaptured
	case KindVoid:
		return StatusVoided
	case KindRefund:
		return StatusRefunded
	}
	return ""
}

// OperationRequest is sent to POST {BaseURL}/v1/{Kind}; IdempotencyKey goes
// in the Idempotency-Key header.
type OperationRequest struct {
	// Kind says which operation. Required.
	Kind OperationKind `json:"-"`
	// IdempotencyKey is derived from the object, e.g. <charge id>:capture,
	// <refund id>:refund; the same on every attempt. Required.
	IdempotencyKey string `json:"-"`
	// FirstSend: as AuthorizeRequest.FirstSend; false looks the reference
	// up before the first send.
	FirstSend bool `json:"-"`
	// PSP names the PSP that holds the authorization, for a router among
	// several (internal/routing); a Client ignores it.
	PSP string `json:"-"`
	// Authorization is the PSP's id of the authorization operated on.
	Authorization string `json:"authorization"`
	// Amount is in the currency's minor unit: required for captures and
	// refunds, and zero (left out) for voids.
	Amount int64 `json:"amount,omitempty"`
	// Reference is the charge id (captures, voids) or the refund id
	// (refunds): what a lookup finds the operation by.
	Reference string `json:"reference"`
}

func (r OperationRequest) validate() error {
	switch {
	case r.Kind.success() == "":
		return fmt.Errorf("operation %q: unknown kind", r.Kind)
	case r.IdempotencyKey == "":
		return fmt.Errorf("%s: idempotency key is required", r.Kind)
	case r.Reference == "":
		return fmt.Errorf("%s %s: reference is required", r.Kind, r.IdempotencyKey)
	case r.Authorization == "":
		return fmt.Errorf("%s %s: authorization is required", r.Kind, r.IdempotencyKey)
	case r.Kind == KindVoid && r.Amount != 0:
		return fmt.Errorf("%s %s: a void takes no amount", r.Kind, r.IdempotencyKey)
	case r.Kind != KindVoid && r.Amount <= 0:
		return fmt.Errorf("%s %s: amount %d must be positive", r.Kind, r.IdempotencyKey, r.Amount)
	}
	return nil
}

// OperateOnce sends req once, exactly, and classifies the answer, as
// AuthorizeOnce does for authorizations. A refusal of the PSP's invariants
// (capture beyond the authorized amount, a second capture or void, refunds
// beyond the captured amount) is a final failure, ErrRejected.
func (c *Client) OperateOnce(ctx context.Context, req OperationRequest) (Outcome, error) {
	if err := req.validate(); err != nil {
		return Outcome{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Outcome{}, fmt.Errorf("%s %s: encode request: %w", req.Kind, req.IdempotencyKey, err)
	}
	out, err := c.sendOperation(ctx, req, body)
	if err != nil {
		return out, fmt.Errorf("%s %s: %w", req.Kind, req.IdempotencyKey, err)
	}
	return out, nil
}

// OperateOutcome is one attempt to get req done, by the rule of
// AuthorizeOutcome: look up (unless FirstSend), send, and after an unknown
// outcome look up before sending again. A lookup that finds an operation of
// req.Kind on req.Authorization settles it as a success.
func (c *Client) OperateOutcome(ctx context.Context, req OperationRequest) (Outcome, error) {
	if err := req.validate(); err != nil {
		return Outcome{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Outcome{}, fmt.Errorf("%s %s: encode request: %w", req.Kind, req.IdempotencyKey, err)
	}
	out, err := c.settle(ctx, req.FirstSend,
		func(ctx context.Context) (Outcome, error) { return c.sendOperation(ctx, req, body) },
		func(ctx context.Context) (Outcome, bool, error) {
			op, found, err := c.FindOperation(ctx, req)
			if err != nil || !found {
				return Outcome{}, false, err
			}
			return Outcome{Class: ClassSuccess, Operation: op}, true, nil
		})
	out.Call, out.Key = req.Kind.Call(), req.IdempotencyKey
	if err != nil {
		return out, fmt.Errorf("%s %s: %w", req.Kind, req.IdempotencyKey, err)
	}
	return out, nil
}

// FindOperation looks up the operation of req.Kind made for req.Reference on
// req.Authorization, and reports whether the PSP holds it. An operator's
// resolution asks it before settling a capture, void or refund. Errors as
// Lookup's.
func (c *Client) FindOperation(ctx context.Context, req OperationRequest) (Operation, bool, error) {
	list, err := c.LookupOperations(ctx, req.Kind, req.Reference)
	if err != nil {
		return Operation{}, false, err
	}
	i := slices.IndexFunc(list, func(op Operation) bool { return op.Authorization == req.Authorization })
	if i < 0 {
		return Operation{}, false, nil
	}
	return list[i], true, nil
}

// LookupOperations asks the PSP for every operation of kind made for
// reference, by GET {BaseURL}/v1/{kind}?reference=. Errors as Lookup's.
func (c *Client) LookupOperations(ctx context.Context, kind OperationKind, reference string) ([]Operation, error) {
	if kind.success() == "" {
		return nil, fmt.Errorf("lookup: unknown kind %q", kind)
	}
	var list []Operation
	if err := c.lookup(ctx, c.base.JoinPath("v1", string(kind)).String(), reference, &list); err != nil {
		return nil, err
	}
	for _, op := range list {
		if err := checkOperation(op, kind, reference); err != nil {
			return nil, fmt.Errorf("lookup %s: %w", reference, malformed(err))
		}
	}
	return list, nil
}

// sendOperation is OperateOnce with the body encoded.
func (c *Client) sendOperation(ctx context.Context, req OperationRequest, body []byte) (Outcome, error) {
	ans := c.do(ctx, http.MethodPost, c.base.JoinPath("v1", string(req.Kind)).String(), req.IdempotencyKey, body)
	out := Outcome{StatusCode: ans.status, Sent: 1}
	var result string
	if ans.err == nil && ans.status >= 200 && ans.status < 300 {
		ans.err = json.Unmarshal(ans.body, &out.Operation)
		if ans.err != nil {
			ans.err = fmt.Errorf("%w: %w: %s", errMalformed, ans.err, snippet(ans.body))
		} else {
			ans.err = checkOperation(out.Operation, req.Kind, req.Reference)
		}
		if ans.err == nil && out.Operation.Authorization != req.Authorization {
			ans.err = fmt.Errorf("%w: %s is on authorization %s, not %s", errMalformed, out.Operation.ID, out.Operation.Authorization, req.Authorization)
		}
		result = out.Operation.Status
	}
	out.Class = Classify(ans.status, result, ans.err)
	return finishOutcome(ctx, out, ans)
}

// finishOutcome fills in what a classified answer carries besides its
// class, and the error of its class.
func finishOutcome(ctx context.Context, out Outcome, ans answer) (Outcome, error) {
	switch out.Class {
	case ClassSuccess:
		return out, nil
	case ClassFinalFailure:
		if out.Declined() {
			return out, nil
		}
		f := newFailure(ctx, out.Class, ans.status, fmt.Errorf("%w: status %d: %s", ErrRejected, ans.status, snippet(ans.body)))
		out.Reason = cmp.Or(pspReason(ans.body), f.Public)
		return out, f
	case ClassBusy:
		out.RetryAfter = ans.retryAfter
		f := newFailure(ctx, out.Class, ans.status, fmt.Errorf("%w: status %d: %s", ErrBusy, ans.status, snippet(ans.body)))
		out.Reason = cmp.Or(pspReason(ans.body), f.Public)
		return out, f
	default:
		out.Authorization, out.Operation = Authorization{}, Operation{}
		f := ans.unknown(ctx)
		out.Reason = f.Public
		return out, f
	}
}

// checkOperation rejects an operation this service could not record
// faithfully, or one made for another reference.
func checkOperation(op Operation, kind OperationKind, reference string) error {
	switch {
	case op.ID == "":
		return fmt.Errorf("%w: empty id", errMalformed)
	case op.Status != kind.success():
		return fmt.Errorf("%w: status %q is not %q", errMalformed, op.Status, kind.success())
	case op.Reference != "" && op.Reference != reference:
		return fmt.Errorf("%w: %s is for %q, not %q", errMalformed, op.ID, op.Reference, reference)
	}
	return nil
}
