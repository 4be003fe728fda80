// Package psp talks to the payment service provider: an HTTP client whose
// every answer carries its outcome class (classify.go), which looks an
// operation up by reference before it ever sends it again (authorize.go),
// over a transport that never resends by itself (transport.go). The mock
// PSP that tests, `make run` and bin/mockpsp serve is package mockpsp.
//
// A URL is logged or quoted only through RedactURL, without its user
// information, query or fragment. PSP_URL and PSPS may carry credentials
// there, and net/http's *url.Error keeps the user name and the query. A
// lookup adds its reference to the base URL's own query.
//
//	go test ./internal/psp/ -run '^TestConfiguredURLCredentialsAreNeverLogged$'
//	go test ./internal/psp/ -run '^TestLookupKeepsTheBaseURLsQuery$'
//	go test ./cmd/api/ -run '^TestConfiguredURLCredentialsAreNeverLogged$'
//	go test ./cmd/reaper/ -run '^TestConfiguredURLCredentialsAreNeverLogged$'
package psp
