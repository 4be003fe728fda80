// Package api holds the OpenAPI document of the charges HTTP API served by
// bin/api. The document is the machine-readable twin of docs/api.md:
// handlers are written against it and black-box tests check real exchanges
// against it (see package apitest).
package api

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/getkin/kin-openapi/openapi3"
)

// Spec is the OpenAPI 3.0 document (api/openapi.yaml), embedded so the binary
// and the tests use the very bytes that are reviewed, not a copy that drifts.
//
//go:embed openapi.yaml
var Spec []byte

// Load parses Spec and validates it as an OpenAPI 3.0 document, including
// its examples against their schemas. Each call returns a fresh *openapi3.T,
// so a caller may change it (for example its servers) without affecting
// other callers.
func Load() (*openapi3.T, error) {
	ctx := context.Background()

	loader := openapi3.NewLoader()
	// The document is self-contained; refusing external refs keeps loading
	// from ever touching the file system or the network.
	loader.IsExternalRefsAllowed = false

	doc, err := loader.LoadFromData(Spec)
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("validate openapi.yaml: %w", err)
	}
	return doc, nil
}
