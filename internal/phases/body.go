package phases

import "fmt"

// Body is a request's body as Do receives it. It holds the bytes as they
// came (AsSent), or a request parsed already (Parsed).
//
// Bytes as they came let a retry of a finished request, sent with its first
// attempt's bytes, be answered by one read of its key. Its strict decoding,
// validation and canonicalisation would cost a replay as much as that read.
type Body struct {
	sent   []byte
	parsed *Request
}

// AsSent is a body as it came, parsed by the operation's Parse only when
// its key cannot answer it as it is.
func AsSent(b []byte) Body { return Body{sent: b} }

// Parsed is a request already parsed and fingerprinted (NewRequest).
func Parsed(req Request) Body { return Body{parsed: &req} }

// ParseError is an operation's Parse refusing a request, a 400. Nothing was
// decided about its key and nothing stored.
type ParseError struct{ Err error }

func (e *ParseError) Error() string { return e.Err.Error() }
func (e *ParseError) Unwrap() error { return e.Err }

// parse returns the request b is for path.
//
// A request parsed or fingerprinted for another method or path is refused,
// since its fingerprint would be compared with another request's.
func (op *Operation[S]) parse(path string, b Body) (Request, error) {
	if b.parsed != nil {
		if b.parsed.Method != op.Method || b.parsed.Path != path {
			return Request{}, fmt.Errorf("%s: a request parsed for %s %s run as %s %s",
				op.Name, b.parsed.Method, b.parsed.Path, op.Method, path)
		}
		return *b.parsed, nil
	}
	if op.Parse == nil {
		return Request{}, fmt.Errorf("%s: a body as sent, and no Parse", op.Name)
	}
	req, err := op.Parse(path, b.sent)
	if err != nil {
		return Request{}, &ParseError{Err: err}
	}
	if req.Method != op.Method || req.Path != path {
		return Request{}, fmt.Errorf("%s: a request to %s %s was fingerprinted as %s %s",
			op.Name, op.Method, path, req.Method, req.Path)
	}
	return req, nil
}
