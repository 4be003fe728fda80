package webhooks

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/events"
)

// RedactedSecret stands for a signing secret wherever one is kept or shown
// but must not be readable: the stored answer to an endpoint's creation
// (which a replay fills in while the endpoint lives, see
// internal/httpapi), and operator views.
const RedactedSecret = SecretPrefix + "…"

// secretPattern matches a signing secret (whsec_ and 48 hex digits; any
// run of letters, digits, - and _ after the prefix, to be safe).
var secretPattern = regexp.MustCompile(`whsec_[0-9A-Za-z_-]+`)

// RedactSecrets returns b with every signing secret in it replaced by
// RedactedSecret: for what operators are shown (bin/api requests show),
// where an answer stored before secrets were kept out of stored answers
// may still hold one until retention drops it.
func RedactSecrets(b []byte) []byte {
	return secretPattern.ReplaceAllLiteral(b, []byte(RedactedSecret))
}

const liveSecretSQL = `SELECT secret FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL`

// LiveSecret returns the secret of one of the tenant's endpoints, and false
// if it was deleted (or never existed): the secret is shown again only
// while the endpoint lives.
func LiveSecret(ctx context.Context, q events.DBTX, tenantID int64, id string) (string, bool, error) {
	var secret string
	err := q.QueryRow(ctx, liveSecretSQL, tenantID, id).Scan(&secret)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("secret of webhook endpoint %q: %w", id, err)
	}
	return secret, true, nil
}
