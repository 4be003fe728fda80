package webhooks

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Result is one recorded attempt.
type Result struct {
	EventID, EndpointID string
	Attempt             int
	StatusCode          int
	Err                 string
	// State is the delivery's state after it: pending (to be retried),
	// succeeded or failed (given up). Empty if the lease was lost and
	// nothing was recorded.
	State string
}

// recordSQL records an attempt, fenced by the holder's lock_version: a
// deliverer whose lease ran out and was taken over records nothing (the new
// holder's attempt will). Success ends the delivery; a failure schedules
// the next attempt on the retry schedule (computed by the database, as for
// keys: RetryBase·2ⁿ ±25%, at most RetryMax), or gives up once the event is
// GiveUpAfter old. The attempt row is written in the same statement.
const recordSQL = `
WITH u AS (
    UPDATE webhook_deliveries
       SET attempts = attempts + 1,
           locked_until = NULL,
           last_error = left(nullif($6, ''), 1000),
           state = CASE WHEN $7 THEN 'succeeded'
                        WHEN event_created_at <= phasepay_now() - $10 * interval '1 microsecond' THEN 'failed'
                        ELSE 'pending' END,
           finished_at = CASE WHEN $7 OR event_created_at <= phasepay_now() - $10 * interval '1 microsecond'
                              THEN phasepay_now() END,
           next_attempt_at = phasepay_now() + least(least($8 * power(2, least(attempts, 40)), $9) * (0.75 + random() / 2), $9)
                                              * interval '1 microsecond'
     WHERE tenant_id = $1 AND event_id = $2 AND endpoint_id = $3 AND event_created_at = $4
       AND lock_version = $5 AND state = 'pending'
    RETURNING tenant_id, event_id, endpoint_id, event_created_at, attempts, state, phasepay_now() - event_created_at AS age
), a AS (
    INSERT INTO webhook_attempts (tenant_id, event_id, event_created_at, endpoint_id, attempt, attempted_at,
                                  status_code, latency_ms, error)
    SELECT tenant_id, event_id, event_created_at, endpoint_id, attempts, $11, nullif($12, 0), $13, nullif($6, '')
      FROM u
)
SELECT attempts, state, extract(epoch FROM age)::float8 FROM u`

// attempt sends one delivery and records the outcome.
func (d *Deliverer) attempt(ctx context.Context, dl delivery) {
	start := time.Now()
	status, cause := d.send(ctx, dl)
	latency := time.Since(start)
	ok := cause == nil && status >= 200 && status <= 299
	errText := ""
	if !ok {
		errText = attemptError(status, cause, d.cfg.Timeout)
	}
	res := Result{EventID: dl.EventID, EndpointID: dl.EndpointID, StatusCode: status, Err: errText}
	var age float64
	err := d.pool.QueryRow(ctx, recordSQL, dl.TenantID, dl.EventID, dl.EndpointID, dl.EventCreatedAt, dl.LockVersion,
		errText, ok, d.cfg.RetryBase.Microseconds(), d.cfg.RetryMax.Microseconds(), d.cfg.GiveUpAfter.Microseconds(),
		start, status, latency.Milliseconds()).Scan(&res.Attempt, &res.State, &age)
	if !ok {
		// The tenant reads errText; the raw cause (which may name the
		// address dialled or the resolver) is the operator's. Never the
		// URL: its query may carry a token.
		attrs := []any{"event", dl.EventID, "endpoint", dl.EndpointID, d.names.Attr(ctx, dl.TenantID), "host", dl.Host, "error", errText}
		if cause != nil {
			attrs = append(attrs, "cause", cause.Error())
		}
		d.log.InfoContext(ctx, "webhook attempt failed", attrs...)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		d.log.InfoContext(ctx, "webhook attempt not recorded: lease lost to another deliverer", "event", dl.EventID, "endpoint", dl.EndpointID)
	case err != nil:
		// The lease runs out and the delivery is attempted again: at
		// least once.
		d.log.WarnContext(ctx, "could not record webhook attempt", "event", dl.EventID, "endpoint", dl.EndpointID, "error", err.Error())
	default:
		ep := metric.WithAttributes(attribute.String("endpoint", dl.EndpointID))
		d.m.attempts.Add(ctx, 1, metric.WithAttributes(attribute.String("endpoint", dl.EndpointID), attribute.Bool("ok", ok)))
		d.m.attemptSeconds.Record(ctx, latency.Seconds())
		switch res.State {
		case "succeeded":
			d.m.deliverySeconds.Record(ctx, age)
		case "failed":
			d.m.failed.Add(ctx, 1, ep)
			d.log.WarnContext(ctx, "webhook delivery given up", "event", dl.EventID, "endpoint", dl.EndpointID,
				d.names.Attr(ctx, dl.TenantID), "host", dl.Host, "attempts", res.Attempt, "error", errText)
		}
	}
	if d.TestAttemptDone != nil {
		d.TestAttemptDone(res)
	}
	d.TestSignals.AttemptDone.Signal(res)
}
