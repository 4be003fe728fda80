package psp

// ErrMalformed is errMalformed, for the tests of package psp_test (the
// client's, which run it against the mock PSP of package mockpsp).
var ErrMalformed = errMalformed

// MaxReasonRunes is maxReasonRunes, for the same tests.
const MaxReasonRunes = maxReasonRunes
