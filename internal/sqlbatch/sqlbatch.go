// Package sqlbatch holds the set-based form of a statement: the statement
// written once for many requests, each of its parameters an array with an
// element per request.
//
// The phase engine runs the transactions of concurrent requests as one
// when every statement in them has such a form (phases, batch.go). What a
// statement costs PostgreSQL is mostly paid per statement, not per row:
// its plan's start-up, its CHECK expressions prepared again, a partitioned
// table opened. One statement for sixteen requests pays it once.
//
// A form follows three rules, which the engine relies on:
//
//   - Parameter $i of the form is the array of parameter $i of each
//     request's statement, in the order of the requests. A statement with
//     no parameters gets the number of requests as $1.
//   - A form whose statement answers a row answers one row per request, in
//     the order of the arrays, with the statement's columns.
//   - A form fails, as a whole, wherever the statement would fail for any
//     one request: a fence that matched fewer rows than requests, a key
//     that exists. The engine then runs each request alone, on its own
//     statements, so that each meets its own outcome.
package sqlbatch

import "sync"

var forms sync.Map // single statement's SQL → its form's

// Register records many as the set-based form of single. It returns single,
// so that a statement and its form can be declared together:
//
//	var finishSQL = sqlbatch.Register(`UPDATE …`, `UPDATE … FROM unnest(…)`)
//
// Registering a second form for a statement panics: a programming error.
func Register(single, many string) string {
	if _, dup := forms.LoadOrStore(single, many); dup {
		panic("sqlbatch: a second form for " + single)
	}
	return single
}

// Of returns the set-based form of single, if one was registered.
func Of(single string) (many string, ok bool) {
	v, ok := forms.Load(single)
	if !ok {
		return "", false
	}
	return v.(string), true
}
