package charges

import "github.com/phasepay/phasepay/internal/sqlbatch"

// The set-based forms of a new charge's statements, for the phase engine's
// batches of concurrent requests (package sqlbatch gives the rules). A
// derived id an earlier incarnation holds fails the batch on charges_pkey,
// and its request meets ErrObjectIDTaken alone.
const chargesInput = `
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[], $5::bigint[], $6::text[],
                         $7::text[], $8::text[], $9::jsonb[], $10::text[])
             WITH ORDINALITY AS u(tenant_id, id, key, key_created_at, amount, currency, payment_method, description,
                                  metadata, psp, n)`

const chargesInsert = `
    INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at,
                         amount, currency, payment_method, description, metadata, status, psp)
    SELECT tenant_id, id, key, coalesce(key_created_at, phasepay_now()), amount, currency, payment_method,
           description, metadata, 'pending', psp
      FROM input
     ORDER BY n
    RETURNING ` + chargeColumns

func init() {
	sqlbatch.Register(insertChargeAloneSQL, `
WITH input AS (`+chargesInput+`
), charge AS (`+chargesInsert+`
)
SELECT charge.* FROM charge JOIN input ON input.tenant_id = charge.tenant_id AND input.id = charge.id ORDER BY input.n`)

	sqlbatch.Register(insertChargeSQL, `
WITH input AS (`+chargesInput+`
), charge AS (`+chargesInsert+`
), first_attempt AS (
    INSERT INTO charge_attempts (tenant_id, charge_id, n, psp, psp_key)
    SELECT u.tenant_id, u.id, 1, u.psp, u.psp_key
      FROM unnest($1::bigint[], $2::text[], $10::text[], $11::text[]) AS u(tenant_id, id, psp, psp_key)
)
SELECT charge.* FROM charge JOIN input ON input.tenant_id = charge.tenant_id AND input.id = charge.id ORDER BY input.n`)

	sqlbatch.Register(recordChargeAuthorizationSQL, `
UPDATE charges c
   SET status = u.status, psp_reference = u.psp_reference, decline_code = u.decline_code,
       failure_reason = u.failure_reason, psp = u.psp, updated_at = phasepay_now()
  FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
       AS u(tenant_id, id, status, psp_reference, decline_code, failure_reason, psp)
 WHERE c.tenant_id = u.tenant_id AND c.id = u.id`)

	sqlbatch.Register(recordAuthorizationSQL, `
WITH u AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                         $8::int[], $9::text[])
             AS u(tenant_id, id, status, psp_reference, decline_code, failure_reason, psp, n, outcome)
), ended AS (
    UPDATE charge_attempts a SET outcome = u.outcome, ended_at = phasepay_now()
      FROM u
     WHERE a.tenant_id = u.tenant_id AND a.charge_id = u.id AND a.n = u.n
)
UPDATE charges c
   SET status = u.status, psp_reference = u.psp_reference, decline_code = u.decline_code,
       failure_reason = u.failure_reason, psp = u.psp, updated_at = phasepay_now()
  FROM u
 WHERE c.tenant_id = u.tenant_id AND c.id = u.id`)
}
