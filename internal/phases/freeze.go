package phases

import (
	"bytes"
	"reflect"
	"time"
)

// freeze copies a queued statement's arguments one level deep. A pointer,
// slice or map is replaced by a copy of what it refers to.
//
// A queued statement is encoded only when its exchange is sent. Without
// the copy, a phase that changed a field after queueing it wrote the later
// value, or half of it (pitfall E3 "A queued write that reads its
// arguments late").
func freeze(args []any) []any {
	if len(args) == 0 {
		return nil
	}
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = frozen(a)
	}
	return out
}

// frozen is a copy of a, or a itself where a refers to nothing.
func frozen(a any) any {
	switch v := a.(type) {
	case nil, string, bool, int, int16, int32, int64, float64, time.Time, time.Duration:
		return a
	case []byte:
		if v == nil {
			return v
		}
		return bytes.Clone(v)
	}
	rv := reflect.ValueOf(a)
	switch rv.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			return a
		}
		c := reflect.New(rv.Type().Elem())
		c.Elem().Set(rv.Elem())
		return c.Interface()
	case reflect.Slice:
		if rv.IsNil() {
			return a
		}
		c := reflect.MakeSlice(rv.Type(), rv.Len(), rv.Len())
		reflect.Copy(c, rv)
		return c.Interface()
	case reflect.Map:
		if rv.IsNil() {
			return a
		}
		c := reflect.MakeMapWithSize(rv.Type(), rv.Len())
		for it := rv.MapRange(); it.Next(); {
			c.SetMapIndex(it.Key(), it.Value())
		}
		return c.Interface()
	}
	return a
}
