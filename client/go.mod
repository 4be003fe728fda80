module github.com/phasepay/phasepay/client

// The oldest Go this package needs (log/slog's DiscardHandler is 1.24): a
// module of its own, so that importing the client does not raise an
// importer's Go to the server's (go.mod at the root, 1.26 for its
// dependencies).
go 1.24.0

require (
	github.com/google/uuid v1.6.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
