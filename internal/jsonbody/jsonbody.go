// Package jsonbody decodes HTTP request bodies strictly: it owns the syntax
// rules every request body of the API obeys (docs/api.md,
// "Basics"), so that each operation only validates its own values.
//
// encoding/json alone is too lenient for a body that is fingerprinted and
// then executed: it matches member names case-insensitively and keeps the
// last of a repeated name, so {"amount":100,"AMOUNT":5000} decodes to 5000
// while a canonicaliser keeps both members; it replaces invalid UTF-8 and
// lone surrogates with U+FFFD; it accepts U+0000, which PostgreSQL text
// rejects later with a 500. encoding/json/v2 (and its module
// github.com/go-json-experiment/json) gets most of this right, but in this
// Go release v2 is behind GOEXPERIMENT=jsonv2 and the module is not among
// the versions we may depend on, so this package is a small strict layer
// over encoding/json: one pass over the tokens checks the rules below with
// the target's type in hand, and only then does encoding/json decode the
// values, when no name can be ambiguous any more.
package jsonbody

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of objects and arrays in a body. Request
// bodies are a few levels deep; the bound keeps a hostile body of 64 KiB of
// '[' from costing more than it should.
const MaxDepth = 32

// Error is why a body was refused: always the client's fault, answered with
// 400 invalid_request.
type Error struct {
	// Field is the member at fault as a dotted path ("metadata.order"), or
	// "" when the body as a whole is at fault.
	Field string
	// Message says what is wrong, for a human.
	Message string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Decode decodes body, which must be exactly one JSON object, into v, a
// non-nil pointer to a zero struct or map. It refuses, with an *Error:
//
//   - invalid JSON, a top level that is not an object, or anything but
//     white space after the object;
//   - invalid UTF-8, and \u escapes of lone surrogates (which encoding/json
//     would silently turn into U+FFFD);
//   - U+0000 in any string, names included;
//   - a member name repeated in one object, also when the repeats differ
//     only in letter case (as encoding/json folds case, e.g. "amount" and
//     "AMOUNT"); this holds in every object, maps included, so no two
//     members of a body can ever be confused;
//   - where v's type has a struct, a member that is not one of its fields'
//     JSON names exactly: an unknown name, or a known one in another case
//     ("Amount");
//   - null where the Go type has no null (a string, a number, a struct);
//     pointers, maps, slices and interfaces take null;
//   - a value of the wrong type, or a number out of its type's range;
//   - nesting deeper than MaxDepth.
//
// Any other error (v not a pointer) is the caller's bug, not the client's.
func Decode(body []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("jsonbody: Decode needs a non-nil pointer, got %T", v)
	}
	if !utf8.Valid(body) {
		return &Error{Message: "body is not valid UTF-8"}
	}

	// A body that is valid JSON, as nearly every request's is, is walked
	// by a lexer over its bytes; any other body by encoding/json's
	// tokenizer, whose syntax errors are what the client is told. Both
	// yield the same tokens, so both refuse the same bodies with the same
	// errors (TestLexerMatchesDecoder): the lexer only spares the
	// tokenizer's cost (it decodes every scalar as a top-level value,
	// allocating a syntax error for the separator that ends each one).
	var w walker
	if json.Valid(body) {
		w.src = &lexer{body: body}
	} else {
		w.src = newDecoderTokens(body)
	}
	if err := w.walk(rv.Type().Elem()); err != nil {
		return err
	}

	// Every name is now exact and unique, so encoding/json's case folding
	// cannot pick a member other than the one checked above.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	return nil
}

// walker checks one body's tokens against a type.
type walker struct {
	src tokens
}

// walk checks a whole body, which must be one object, against t.
func (w *walker) walk(t reflect.Type) error {
	tok, err := w.token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return &Error{Message: "body must be a JSON object"}
	}
	if err := w.object(t, "", 1); err != nil {
		return err
	}
	return w.src.end()
}

func (w *walker) token() (json.Token, error) { return w.src.token() }

// value checks the value that starts with tok, to be decoded into t (nil:
// no type to check names against).
func (w *walker) value(tok json.Token, t reflect.Type, field string, depth int) error {
	switch tok := tok.(type) {
	case json.Delim: // '{' or '[': a closing one never starts a value
		if depth >= MaxDepth {
			return &Error{Field: field, Message: fmt.Sprintf("nested more than %d levels deep", MaxDepth)}
		}
		st := shape(t)
		if tok == '{' {
			if st != nil && st.Kind() != reflect.Struct && st.Kind() != reflect.Map {
				return &Error{Field: field, Message: "must be " + describe(st)}
			}
			return w.object(st, field, depth+1)
		}
		if st != nil && st.Kind() != reflect.Slice && st.Kind() != reflect.Array {
			return &Error{Field: field, Message: "must be " + describe(st)}
		}
		return w.array(st, field, depth+1)
	case string:
		if err := w.checkString(tok, field); err != nil {
			return err
		}
		return checkKind(tok, shape(t), field)
	case nil:
		if t != nil && !nullable(t) {
			return &Error{Field: field, Message: "must not be null"}
		}
		return nil
	default:
		return checkKind(tok, shape(t), field)
	}
}

// checkKind refuses a scalar of the wrong JSON type for t, here rather than
// in encoding/json, which names a map's element by the map alone and gives
// no reason for a number out of range.
func checkKind(tok json.Token, t reflect.Type, field string) error {
	if t == nil {
		return nil
	}
	ok := false
	switch tok := tok.(type) {
	case string:
		ok = t.Kind() == reflect.String
	case bool:
		ok = t.Kind() == reflect.Bool
	case json.Number:
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			_, err := strconv.ParseInt(tok.String(), 10, t.Bits())
			ok = err == nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			_, err := strconv.ParseUint(tok.String(), 10, t.Bits())
			ok = err == nil
		case reflect.Float32, reflect.Float64:
			_, err := strconv.ParseFloat(tok.String(), t.Bits())
			ok = err == nil
		}
	}
	if !ok {
		return &Error{Field: field, Message: "must be " + describe(t)}
	}
	return nil
}

// object checks the members of an object whose '{' was just read, up to
// and including its '}'.
func (w *walker) object(t reflect.Type, field string, depth int) error {
	t = shape(t)
	// seen maps each name's case fold to the name as sent.
	seen := map[string]string{}
	for w.src.more() {
		tok, err := w.token()
		if err != nil {
			return err
		}
		name := tok.(string) // the decoder allows nothing else here
		if err := w.checkString(name, join(field, name)); err != nil {
			return err
		}
		folded := foldName(name)
		if prev, dup := seen[folded]; dup {
			if prev == name {
				return &Error{Field: join(field, name), Message: "member appears more than once"}
			}
			return &Error{Field: join(field, name), Message: fmt.Sprintf("member repeats %q in another letter case", prev)}
		}
		seen[folded] = name

		var elem reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Struct:
			fields := fieldsOf(t)
			f, ok := fields.exact[name]
			if !ok {
				if want, ok := fields.folded[folded]; ok {
					return &Error{Field: join(field, name), Message: fmt.Sprintf("unknown member (names are case-sensitive: %q)", want)}
				}
				return &Error{Field: join(field, name), Message: "unknown member"}
			}
			elem = f
		case t.Kind() == reflect.Map:
			elem = t.Elem()
		}

		if tok, err = w.token(); err != nil {
			return err
		}
		if err := w.value(tok, elem, join(field, name), depth); err != nil {
			return err
		}
	}
	_, err := w.token() // '}'
	return err
}

// array checks the elements of an array whose '[' was just read, up to and
// including its ']'.
func (w *walker) array(t reflect.Type, field string, depth int) error {
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	for i := 0; w.src.more(); i++ {
		tok, err := w.token()
		if err != nil {
			return err
		}
		if err := w.value(tok, elem, field+"["+strconv.Itoa(i)+"]", depth); err != nil {
			return err
		}
	}
	_, err := w.token() // ']'
	return err
}

// checkString refuses U+0000 and lone surrogates in the string token just
// read (s, as decoded).
func (w *walker) checkString(s, field string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return &Error{Field: field, Message: "must not contain U+0000"}
	}
	// encoding/json decodes a lone surrogate escape to U+FFFD, which a
	// client may also send on purpose: only then is the raw text looked at.
	if strings.ContainsRune(s, utf8.RuneError) {
		if loneSurrogate(w.src.raw()) {
			return &Error{Field: field, Message: "must be valid Unicode (a \\u escape is a lone surrogate)"}
		}
	}
	return nil
}

// loneSurrogate reports whether raw, a JSON string with its quotes that the
// decoder has already found well-formed, escapes a surrogate that is not
// part of a \uD8xx\uDCxx pair.
func loneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character
		if raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1 : i+5])
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			next := raw[i+1:]
			if len(next) < 6 || next[0] != '\\' || next[1] != 'u' {
				return true
			}
			if low := hex4(next[2:6]); low < 0xDC00 || low > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}

func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32) // well-formed: checked by the decoder
	return rune(n)
}

// foldName is encoding/json's own case folding of member names (ASCII
// upper-casing, and the smallest rune of each Unicode simple fold orbit, so
// "K", "k" and the Kelvin sign fold alike): two names fold alike exactly
// when encoding/json could match one for the other.
func foldName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range name {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			continue
		}
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		b.WriteRune(r)
	}
	return b.String()
}

func join(field, name string) string {
	if field == "" {
		return name
	}
	return field + "." + name
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shape returns the type whose members a JSON value is checked against:
// t without pointers, or nil when t decodes itself (its names are its own
// business) or is an interface.
func shape(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
			t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
			return nil
		}
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
		case reflect.Interface:
			return nil
		default:
			return t
		}
	}
	return nil
}

// nullable reports whether encoding/json stores null in t as "absent"
// (nil) rather than silently leaving a zero value that means something
// else.
func nullable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return true
	}
	return shape(t) == nil // decodes itself: its null is its business
}

// structFields are a struct's JSON member names, exact and folded.
type structFields struct {
	exact  map[string]reflect.Type
	folded map[string]string
}

var fieldCache sync.Map // reflect.Type → structFields

// fieldsOf returns the members encoding/json decodes into struct type t,
// following its rules: the tag's name or else the field's, "-" skipped,
// unexported fields skipped, embedded structs without a name promoted.
func fieldsOf(t reflect.Type) structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(structFields)
	}
	fs := structFields{exact: map[string]reflect.Type{}, folded: map[string]string{}}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if sf.Anonymous && name == "" {
				if et := shape(sf.Type); et != nil && et.Kind() == reflect.Struct {
					add(et)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if _, dup := fs.exact[name]; !dup {
				fs.exact[name] = sf.Type
				fs.folded[foldName(name)] = name
			}
		}
	}
	add(t)
	fieldCache.Store(t, fs)
	return fs
}

// decodeError turns what encoding/json refused, once the walk passed, into
// an *Error: a value of the wrong type or out of range.
func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return &Error{Field: typeErr.Field, Message: "must be " + describe(typeErr.Type)}
	}
	return &Error{Message: fmt.Sprintf("body is not a valid request: %v", err)}
}

// describe names a Go type as a JSON value, for a client.
func describe(t reflect.Type) string {
	if t == nil {
		return "of another type"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer of at most 64 bits"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Map:
		if t.Elem().Kind() == reflect.String {
			return "an object of strings"
		}
		return "an object"
	case reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return describe(t.Elem())
	}
	return "of another type"
}
