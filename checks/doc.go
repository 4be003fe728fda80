// Package codecheck holds tests that read the repository's Go code as a
// whole rather than run it: that the packages import one another only
// downwards through the layers docs/architecture.md draws, and that no
// test can fail its test from a goroutine of its own. It has no code of
// its own; `go test ./harness/codecheck/` runs the checks.
package codecheck
