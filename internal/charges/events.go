package charges

import (
	"context"
	"fmt"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// chargeEventTypes names the event each status a charge can move to
// writes (pending is where charges start, not a change).
var chargeEventTypes = map[Status]events.Type{
	StatusAuthorized: events.ChargeAuthorized,
	StatusDeclined:   events.ChargeDeclined,
	StatusFailed:     events.ChargeFailed,
	StatusCaptured:   events.ChargeCaptured,
	StatusVoided:     events.ChargeVoided,
}

// refundEventTypes names the event each end of a refund writes.
var refundEventTypes = map[RefundStatus]events.Type{
	RefundSucceeded: events.RefundSucceeded,
	RefundFailed:    events.RefundFailed,
}

// writeStatusEvent records the event of c's new status in tx, the
// transaction that commits the status: the event commits exactly when the
// change does (TestNoStatusChangeWithoutItsEvent).
func writeStatusEvent(ctx context.Context, tx idempotency.DBTX, c *Charge) error {
	typ, ok := chargeEventTypes[c.Status]
	if !ok {
		return fmt.Errorf("charge %s: no event for status %q", c.ID, c.Status)
	}
	obj, err := c.MarshalJSON()
	if err != nil {
		return err
	}
	return events.Record(ctx, tx, c.TenantID, typ, obj)
}

// writeRefundEvent records the event of r's end (refund.succeeded or
// .failed) in tx, the transaction that ends the refund.
func writeRefundEvent(ctx context.Context, tx idempotency.DBTX, r *Refund) error {
	typ, ok := refundEventTypes[r.Status]
	if !ok {
		return fmt.Errorf("refund %s: no event for status %q", r.ID, r.Status)
	}
	obj, err := r.MarshalJSON()
	if err != nil {
		return err
	}
	return events.Record(ctx, tx, r.TenantID, typ, obj)
}
