package events

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// keyObject is the idempotency key as GET /v1/idempotency_keys/{key} shows
// it (internal/httpapi's keyJSON), the object of request.needs_attention.
type keyObject struct {
	Object        string `json:"object"`
	Key           string `json:"key"`
	Endpoint      string `json:"endpoint"`
	State         string `json:"state"`
	RecoveryPoint string `json:"recovery_point"`
	// FailedAttempts counts the attempts that ended without finishing;
	// Attempts is the same number, under the name it had first.
	FailedAttempts int     `json:"failed_attempts"`
	Attempts       int     `json:"attempts"`
	NextAttemptAt  *string `json:"next_attempt_at"`
	LastError      *string `json:"last_error"`
	ResponseStatus *int    `json:"response_status"`
	ObjectID       *string `json:"object_id"`
	CreatedAt      string  `json:"created_at"`
	CompletedAt    *string `json:"completed_at"`
}

// NeedsAttention is the idempotency.NeedsAttentionHook that records
// request.needs_attention in the transaction that gives the key up. Set it
// as idempotency.Config.NeedsAttention wherever keys are released.
func NeedsAttention(ctx context.Context, tx idempotency.DBTX, rec idempotency.Record) error {
	obj := keyObject{
		Object:         "idempotency_key",
		Key:            rec.Key,
		Endpoint:       rec.Request.Method + " " + rec.Request.Path,
		State:          string(idempotency.RequestNeedsAttention),
		RecoveryPoint:  string(rec.Point),
		FailedAttempts: rec.Attempts,
		Attempts:       rec.Attempts,
		CreatedAt:      rec.CreatedAt.UTC().Format(time.RFC3339),
	}
	if rec.LastError != "" {
		obj.LastError = &rec.LastError
	}
	if rec.ObjectID != "" {
		obj.ObjectID = &rec.ObjectID
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("needs attention event: %w", err)
	}
	_, err = Write(ctx, tx, rec.TenantID, RequestNeedsAttention, body)
	return err
}
