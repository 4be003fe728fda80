// Package mockpsp is an in-memory PSP serving the API that package psp's
// client calls (see docs/api.md, "The mock PSP"). It remembers keys for a
// TTL, finds operations by reference, injects faults and keeps its books
// across restarts.
//
// Tests serve it with httptest, bin/mockpsp serves it on its own port, and
// bin/api runs one inside itself when PSP_URL is "embedded". It lives apart
// from package psp so that the production client holds no mock.
package mockpsp
