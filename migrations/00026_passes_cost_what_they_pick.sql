-- +goose Up

-- Every background pass reads what it takes, not what is piled up
-- (pitfall Q9 "A backlog every pass reads again"): each index below
-- turns a filter applied after a scan into an index condition.
--
-- CREATE INDEX on a partitioned table builds every partition's copy under
-- a SHARE lock, which makes writers of that table wait for the build (no
-- CONCURRENTLY for partitioned tables); DROP INDEX takes ACCESS EXCLUSIVE
-- for the few milliseconds it lasts. Run it when the backlog is small.

-- The deliverers' claim (webhooks.candidatesSQL) walks, tenant by tenant,
-- the endpoints with pending deliveries, and reads each endpoint's due
-- deliveries in due order, stopping at what it may take: an endpoint or a
-- host at its cap is left out before its deliveries are read, so 10⁵ due
-- deliveries at a hanging endpoint cost the claim one probe. It replaces
-- webhook_deliveries_tenant_due (migrations/00018), whose per-tenant due
-- order made the claim read a tenant's every due delivery to reach those
-- of an endpoint with room, dropping the capped one's with a filter. The
-- expression is spelled exactly as webhooks.dueAtExpr.
CREATE INDEX webhook_deliveries_endpoint_due ON webhook_deliveries
    (tenant_id, endpoint_id, (greatest(next_attempt_at, coalesce(locked_until, '-infinity'::timestamptz))))
    WHERE state = 'pending';
DROP INDEX webhook_deliveries_tenant_due;

-- The backlog gauges' age of the oldest event with a pending delivery
-- (webhooks.backlogSQL): each tenant's oldest is this index's first entry
-- of the tenant, where it was the minimum over every pending delivery.
-- It costs every pending delivery's row one more index entry (its insert,
-- and each attempt's claim); a delivered one leaves it.
CREATE INDEX webhook_deliveries_tenant_pending ON webhook_deliveries (tenant_id, event_created_at)
    WHERE state = 'pending';

-- The console's count of an endpoint's deliveries given up in the last
-- day. Given-up deliveries are few (3 days of failures each), so the index
-- is small and written only when one is given up.
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (tenant_id, endpoint_id, event_created_at)
    WHERE state = 'failed';

-- The census's count of needs_attention requests (idempotency.censusSQL),
-- which idempotency_keys_unfinished could only find among every started
-- key: during a PSP outage, millions. A key enters it only when it is
-- given up.
CREATE INDEX idempotency_keys_needs_attention ON idempotency_keys (tenant_id, created_at)
    WHERE state = 'needs_attention';

-- Retention's check of an expired day (idempotency.keepReason): a key
-- finished less than RETENTION ago keeps its day. Only a key finished
-- after its own day ended can be one (the day ended more than RETENTION
-- ago), and those are few: the keys claimed just before midnight, and
-- those a long PSP outage kept unfinished. The check read the whole day
-- for max(finished_at); it reads this index's last entry. Every function
-- in the predicate is immutable (timezone(text, timestamptz),
-- date_trunc(text, timestamp)).
CREATE INDEX idempotency_keys_finished_late ON idempotency_keys (finished_at)
    WHERE (finished_at AT TIME ZONE 'UTC') >= date_trunc('day', created_at AT TIME ZONE 'UTC') + interval '1 day';

-- +goose Down
DROP INDEX idempotency_keys_finished_late;
DROP INDEX idempotency_keys_needs_attention;
DROP INDEX webhook_deliveries_failed;
DROP INDEX webhook_deliveries_tenant_pending;
CREATE INDEX webhook_deliveries_tenant_due ON webhook_deliveries
    (tenant_id, (greatest(next_attempt_at, coalesce(locked_until, '-infinity'::timestamptz))))
    WHERE state = 'pending';
DROP INDEX webhook_deliveries_endpoint_due;
