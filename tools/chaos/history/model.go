package history

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/anishathalye/porcupine"
)

// The model is the contract's table of idempotent requests, seen from a
// client, for one tenant's key. It knows the answers a client gets and
// nothing of how phasepay produces them.
//
// Its state is which request holds the key (the fingerprint of the first
// request that reached it, or none) and the key's final answer (or none).
// Each answer a client got falls into one class (classify), and each class
// steps the state:
//
//	final    (2xx, 402, a 400 stored for replay)  the key's request, and
//	         the first final answer or byte for byte the same one: the
//	         key is held by this request and its answer is this one
//	pending  (409, 503 psp_unavailable or payment_unresolved)  the key's
//	         request, no final answer yet: nothing changes, but the key is
//	         held by this request
//	mismatch (422 idempotency_key_mismatch)  only when another request
//	         holds the key
//	unknown  (no answer, 5xx other than those above, 503
//	         database_unavailable)  anything may have happened: the request
//	         may have taken the key, and may even have finished it (the
//	         next client to see the answer fixes it)
//	refused  (400 invalid_request, 401, 404, 413, 415, 429, another 422,
//	         a connection never made)  refused before the key was looked
//	         at, or never sent: nothing changes
//
// No answer marked Idempotent-Replayed is anything but final, and a final
// answer without it (the key's own execution) never answers a request sent
// after another client already had the final answer: such a request finds
// the key done, and is a replay. (A request sent before may answer without
// it: fenced out by a takeover, it answers its successor's stored answer.)
// A request
// whose answer was lost stays pending for the rest of the history
// (Return: the end): Porcupine may place its effect anywhere after its
// invocation, or nowhere, which is all a client can know of it. The
// background work that finishes a key (a reaper, a request whose answer
// was lost) has no operation of its own: a final answer that arrives as a
// replay before any other is the first.

// class is what an answer means to the model.
type class int

const (
	classUnknown class = iota
	classFinal
	classPending
	classMismatch
	classRefused
)

func (c class) String() string {
	return [...]string{"unknown", "final", "pending", "mismatch", "refused"}[c]
}

// classify sorts an answer by the contract's table of idempotent requests.
func classify(op *Op) class {
	switch s := op.Status; {
	case s == 0 && op.Unsent:
		return classRefused
	case s == 0:
		return classUnknown
	case s >= 200 && s < 300, s == http.StatusPaymentRequired:
		return classFinal
	case s == http.StatusBadRequest && op.Code == "invalid_request":
		return classRefused
	case s == http.StatusBadRequest:
		// charge_not_capturable, amount_too_large, endpoint_limit_reached:
		// refused in the charge's state, stored for replay.
		return classFinal
	case s == http.StatusUnprocessableEntity && op.Code == "idempotency_key_mismatch":
		return classMismatch
	case s == http.StatusConflict:
		return classPending
	case s == http.StatusServiceUnavailable && (op.Code == "psp_unavailable" || op.Code == "payment_unresolved"):
		return classPending
	case s >= 500:
		// database_unavailable included: the commit may have been made
		// when the database's answer was lost.
		return classUnknown
	default:
		return classRefused
	}
}

// input is an operation's request as the model sees it.
type input struct {
	fp   string // fingerprint: method, path and canonical body
	call int64  // invocation time
	desc string
}

// output is an operation's answer as the model sees it.
type output struct {
	class    class
	answer   string // status and body hash, for a final answer
	replayed bool
	lost     bool  // no answer arrived
	ret      int64 // return time, for an answer
	desc     string
}

// state is one key's: the fingerprint of the request holding it, its final
// answer ("" for none), and the earliest time a client had that answer (0
// for none).
type state struct {
	holder string
	final  string
	seen   int64
}

// fingerprint is the request's identity as the contract defines it: method,
// path, and the body's JSON with its members sorted and its white space
// gone (reordered or re-indented JSON is the same request). A body that is
// not JSON counts as its bytes.
func fingerprint(op *Op) string {
	body := []byte(op.Body)
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&v) == nil {
		if b, err := json.Marshal(v); err == nil {
			body = b
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", op.Method, op.Path)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func inputOf(op *Op) input {
	return input{fp: fingerprint(op), call: op.Call, desc: fmt.Sprintf("%s %s %s", op.Method, op.Path, op.Body)}
}

func outputOf(op *Op) output {
	o := output{class: classify(op), replayed: op.Replayed, lost: !op.Answered(), ret: op.Return}
	switch {
	case op.Unsent:
		o.desc = "never sent: " + op.Err
	case !op.Answered():
		o.desc = "no answer: " + op.Err
	default:
		o.desc = fmt.Sprintf("%d %s %.12s", op.Status, op.Code, op.Answer)
		if op.Replayed {
			o.desc += " (replayed)"
		}
	}
	if o.class == classFinal {
		o.answer = fmt.Sprintf("%d %s", op.Status, op.Answer)
	}
	return o
}

// step is the model's transition: every state the key may be in after the
// request in was answered out in state s; none if it cannot.
func step(s state, in input, out output) []state {
	mine := s.holder == "" || s.holder == in.fp
	if out.replayed && out.class != classFinal {
		return nil
	}
	switch out.class {
	case classFinal:
		if !mine || (s.final != "" && s.final != out.answer) {
			return nil
		}
		if !out.replayed && s.seen != 0 && s.seen < in.call {
			return nil // sent after a client had the answer, yet not a replay
		}
		seen := out.ret
		if s.seen != 0 {
			seen = min(s.seen, out.ret)
		}
		return []state{{holder: in.fp, final: out.answer, seen: seen}}
	case classPending:
		if !mine || s.final != "" {
			return nil
		}
		return []state{{holder: in.fp}}
	case classMismatch:
		if mine {
			return nil
		}
		return []state{s}
	case classUnknown:
		if s.holder == "" {
			return []state{s, {holder: in.fp}}
		}
		return []state{s}
	default:
		return []state{s}
	}
}

func describeState(s state) string {
	switch {
	case s.holder == "":
		return "new key"
	case s.final == "":
		return fmt.Sprintf("held by %.8s, no final answer", s.holder)
	default:
		return fmt.Sprintf("held by %.8s, final %.16s", s.holder, s.final)
	}
}

// model is the per-key model, for histories of one key (Check partitions
// them itself, to count and draw the rejected keys alone).
var model = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{state{}} },
	Step: func(s, in, out any) []any {
		next := step(s.(state), in.(input), out.(output))
		states := make([]any, len(next))
		for i, n := range next {
			states[i] = n
		}
		return states
	},
	Equal:             func(a, b any) bool { return a.(state) == b.(state) },
	DescribeOperation: func(in, out any) string { return in.(input).desc + " → " + out.(output).desc },
	DescribeState:     func(s any) string { return describeState(s.(state)) },
	DescribeOperationMetadata: func(info any) string {
		if info == nil {
			return ""
		}
		return fmt.Sprint(info)
	},
}).ToModel()
