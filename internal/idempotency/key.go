package idempotency

import (
	"fmt"
	"net/http"
	"strings"
)

// MaxKeyLength is the longest key accepted, in bytes (all of them ASCII).
const MaxKeyLength = 255

// KeyHeader is the request header that carries the key.
const KeyHeader = "Idempotency-Key"

// KeyFromHeader returns the key of a request's headers: exactly one
// Idempotency-Key field, parsed by ParseKey. Two fields are refused rather
// than one of them picked: an intermediary and phasepay could pick
// differently (http.Header.Get takes the first), and a client that sends
// two has a bug that a silent choice would hide until it charged twice.
// A key cannot be split on commas either, since a comma is a valid key
// character.
//
// Errors wrap ErrKeyMissing or ErrKeyInvalid.
func KeyFromHeader(h http.Header) (string, error) {
	values := h.Values(KeyHeader)
	switch len(values) {
	case 0:
		return "", ErrKeyMissing
	case 1:
		return ParseKey(values[0])
	default:
		return "", fmt.Errorf("%w: %d Idempotency-Key header fields; send exactly one", ErrKeyInvalid, len(values))
	}
}

// ParseKey validates an Idempotency-Key header value and returns the key.
//
// Two forms are accepted and mean the same key: the raw token (abc) and the
// string form of the IETF draft, which is an RFC 8941 structured-field string
// ("abc", with \" and \\ as the only escapes). Either way the key itself must
// be 1 to 255 visible ASCII characters, so that it can be logged, compared and
// stored without any normalisation that could make two keys one.
//
// Errors wrap ErrKeyMissing or ErrKeyInvalid.
func ParseKey(header string) (string, error) {
	if header == "" {
		return "", ErrKeyMissing
	}
	key := header
	if len(header) >= 2 && header[0] == '"' && header[len(header)-1] == '"' {
		var err error
		if key, err = unquoteSFString(header[1 : len(header)-1]); err != nil {
			return "", err
		}
	}
	if len(key) == 0 || len(key) > MaxKeyLength {
		return "", fmt.Errorf("%w: must be 1 to %d characters, got %d", ErrKeyInvalid, MaxKeyLength, len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return "", fmt.Errorf("%w: character %d is not visible ASCII", ErrKeyInvalid, i+1)
		}
	}
	return key, nil
}

// unquoteSFString undoes the escapes of an RFC 8941 sf-string body (the part
// between the quotes).
func unquoteSFString(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", fmt.Errorf("%w: bad escape in quoted key", ErrKeyInvalid)
			}
			b.WriteByte(s[i])
		case c == '"':
			return "", fmt.Errorf("%w: unescaped quote in quoted key", ErrKeyInvalid)
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: character %d is not printable ASCII", ErrKeyInvalid, i+2)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
