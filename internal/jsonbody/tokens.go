package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The two sources of a body's tokens: encoding/json's tokenizer, which
// checks the syntax, and a lexer for a body json.Valid already accepted.

// tokens is where a walker reads a body's tokens from: a *lexer (a valid
// body) or *decoderTokens (any body).
type tokens interface {
	// token returns the next token, with syntax errors as *Error. Commas
	// and colons are not tokens.
	token() (json.Token, error)
	// more reports whether the current object or array has another
	// element.
	more() bool
	// raw returns the last token as it appears in the body (a string with
	// its quotes).
	raw() []byte
	// end returns an *Error unless only white space follows.
	end() error
}

// decoderTokens reads tokens with encoding/json's Decoder, which checks the
// syntax.
type decoderTokens struct {
	dec  *json.Decoder
	body []byte
	// start is where the last token's raw bytes (with the white space and
	// separator before it) begin in body.
	start int64
}

func newDecoderTokens(body []byte) *decoderTokens {
	d := &decoderTokens{dec: json.NewDecoder(bytes.NewReader(body)), body: body}
	d.dec.UseNumber() // numbers are only looked at, never converted, here
	return d
}

func (d *decoderTokens) token() (json.Token, error) {
	d.start = d.dec.InputOffset()
	tok, err := d.dec.Token()
	if err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, &Error{Message: fmt.Sprintf("body is not valid JSON: %v (at byte %d)", syntax, syntax.Offset)}
		}
		// io.EOF, io.ErrUnexpectedEOF: the body ends inside a value.
		return nil, &Error{Message: "body is not valid JSON: unexpected end"}
	}
	return tok, nil
}

func (d *decoderTokens) more() bool { return d.dec.More() }

func (d *decoderTokens) raw() []byte {
	raw := d.body[d.start:d.dec.InputOffset()]
	return raw[bytes.IndexByte(raw, '"'):] // skip white space and separator
}

func (d *decoderTokens) end() error {
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return &Error{Message: "unexpected data after the JSON object"}
	}
	return nil
}

// lexer reads the tokens of a body that json.Valid accepted, so it checks
// no syntax: it only finds where each token ends. It yields what
// decoderTokens would: json.Delim, string, json.Number, bool or nil.
type lexer struct {
	body []byte
	pos  int
	// last is where the last token began.
	last int
}

// skip moves past white space and the separators between tokens.
func (l *lexer) skip() {
	for l.pos < len(l.body) {
		switch l.body[l.pos] {
		case ' ', '\t', '\n', '\r', ',', ':':
			l.pos++
		default:
			return
		}
	}
}

func (l *lexer) more() bool {
	l.skip()
	return l.pos < len(l.body) && l.body[l.pos] != '}' && l.body[l.pos] != ']'
}

func (l *lexer) raw() []byte { return l.body[l.last:l.pos] }

// end: json.Valid allowed nothing but white space after the object.
func (l *lexer) end() error { return nil }

func (l *lexer) token() (json.Token, error) {
	l.skip()
	if l.pos >= len(l.body) {
		// Unreachable for a valid body; the decoder's answer for an end.
		return nil, &Error{Message: "body is not valid JSON: unexpected end"}
	}
	l.last = l.pos
	switch c := l.body[l.pos]; c {
	case '{', '}', '[', ']':
		l.pos++
		return json.Delim(c), nil
	case '"':
		escaped := false
		i := l.pos + 1
		for ; i < len(l.body) && l.body[i] != '"'; i++ {
			if l.body[i] == '\\' {
				escaped = true
				i++ // the escaped character, which may be a quote
			}
		}
		l.pos = i + 1
		if !escaped {
			return string(l.body[l.last+1 : i]), nil
		}
		// Escapes are rare in request bodies: encoding/json decodes them,
		// so that lone surrogates become U+FFFD exactly as in the decoder.
		var s string
		if err := json.Unmarshal(l.body[l.last:l.pos], &s); err != nil {
			return nil, &Error{Message: fmt.Sprintf("body is not valid JSON: %v", err)}
		}
		return s, nil
	case 't':
		l.pos += len("true")
		return true, nil
	case 'f':
		l.pos += len("false")
		return false, nil
	case 'n':
		l.pos += len("null")
		return nil, nil
	default: // a number
		i := l.pos
		for ; i < len(l.body); i++ {
			if c := l.body[i]; (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
				break
			}
		}
		l.pos = i
		return json.Number(l.body[l.last:i]), nil
	}
}
