// Package checks holds tests that read the repository's Go code as a whole
// rather than run it. The packages import one another only downwards
// through the layers of the README's table "Where things are and what you
// may change", and that table places every folder holding Go code. No test
// can fail its test from a goroutine of its own, nor sleep without saying
// why on the line above, and every test package that starts goroutines
// checks with goleak that its tests leave none behind.
//
// It has no code of its own; `go test ./checks/` runs the checks.
package checks
