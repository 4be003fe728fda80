package events

import "github.com/phasepay/phasepay/internal/sqlbatch"

// The set-based forms of Record's two statements, for the phase engine's
// batches of concurrent requests (package sqlbatch gives the rules).
func init() {
	// Each request's tenant's shared lock, in the order of the requests:
	// shared locks do not wait for one another, and a DELETE's exclusive
	// one is a single lock, so no order can close a cycle.
	sqlbatch.Register(lockEndpointsSQL, `
SELECT pg_advisory_xact_lock_shared(1886388243, hashtext(u.tenant_id::text))::text
  FROM unnest($1::bigint[]) WITH ORDINALITY AS u(tenant_id, n)
 ORDER BY u.n`)
	// writeSQL for many events: each its own id, row and deliveries, one
	// NOTIFY for them all (PostgreSQL folds a transaction's identical
	// notifications into one anyway). e is read three times, so it is
	// computed once: each event keeps the id its deliveries name.
	sqlbatch.Register(writeSQL, `
WITH e AS MATERIALIZED (
    SELECT u.n, u.tenant_id, u.type, u.object, phasepay_now() AS at,
           'evt_' || lpad(to_hex((extract(epoch FROM phasepay_now()) * 1000000)::bigint), 14, '0')
                  || left(replace(gen_random_uuid()::text, '-', ''), 16) AS id
      FROM unnest($1::bigint[], $2::text[], $3::text[]) WITH ORDINALITY AS u(tenant_id, type, object, n)
), ins AS (
    INSERT INTO events (tenant_id, id, type, created_at, body)
    SELECT e.tenant_id, e.id, e.type, e.at,
           convert_to(format('{"id":%s,"object":"event","type":%s,"created_at":%s,"data":{"object":%s}}',
                             to_json(e.id), to_json(e.type),
                             to_json(to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')), e.object), 'UTF8')
      FROM e
     ORDER BY e.n
    RETURNING id, created_at, body
), queued AS (
    INSERT INTO webhook_deliveries (tenant_id, event_id, event_created_at, endpoint_id, next_attempt_at)
    SELECT e.tenant_id, e.id, e.at, w.id, e.at
      FROM e
      JOIN webhook_endpoints w
        ON w.tenant_id = e.tenant_id AND w.deleted_at IS NULL
       AND (w.events @> ARRAY[e.type] OR w.events @> ARRAY['*'])
    RETURNING 1
), notified AS (
    SELECT (SELECT count(*) FROM queued) > 0 AND pg_notify('`+notifyChannel+`', '') IS NOT NULL AS sent
)
SELECT ins.id, ins.created_at, ins.body, notified.sent
  FROM e JOIN ins ON ins.id = e.id, notified
 ORDER BY e.n`)
}
