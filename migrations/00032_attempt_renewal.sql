-- +goose NO TRANSACTION
-- +goose Up

-- A Stripe PSP (internal/psp/stripepsp) can spend an attempt's key: Stripe
-- saves a 5xx under a key and replays it for a day, and forgets keys after
-- that. Such a charge records a new attempt at the same PSP under a new
-- derived key (<charge>:authorize:<n+1>), ending the old one as 'replaced'
-- in the same fenced transaction. So a charge may now have several attempts
-- at one PSP, but never two open ones: the partial unique index replaces
-- UNIQUE (tenant_id, charge_id, psp), and still says that a charge is never
-- sent to one PSP under two attempts at once.
--
-- psp_reference is a hint, written by Stripe's own webhooks
-- (/v1/psp_webhooks/{psp}): the PaymentIntent Stripe reported for the open
-- attempt, which the next run reads by id rather than waiting for Stripe's
-- search to catch up. It decides nothing by itself (the run checks the
-- PaymentIntent is the charge's), so it is written unfenced.
--
-- Online: the column has no default (no rewrite), the index is built
-- CONCURRENTLY (no lock that stops writes; hence no transaction), and only
-- then is the old constraint dropped. The domain's new CHECK is the old one
-- with one more value, added NOT VALID and validated by a scan.

ALTER TABLE charge_attempts ADD COLUMN IF NOT EXISTS psp_reference text;

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS charge_attempts_open_per_psp
    ON charge_attempts (tenant_id, charge_id, psp) WHERE outcome IS NULL;

ALTER TABLE charge_attempts DROP CONSTRAINT IF EXISTS charge_attempts_tenant_id_charge_id_psp_key;

ALTER DOMAIN attempt_outcome DROP CONSTRAINT IF EXISTS attempt_outcome_check;
ALTER DOMAIN attempt_outcome ADD CONSTRAINT attempt_outcome_check
    CHECK (VALUE IN ('authorized', 'declined', 'refused', 'replaced')) NOT VALID;
ALTER DOMAIN attempt_outcome VALIDATE CONSTRAINT attempt_outcome_check;

-- +goose Down
ALTER DOMAIN attempt_outcome DROP CONSTRAINT IF EXISTS attempt_outcome_check;
ALTER DOMAIN attempt_outcome ADD CONSTRAINT attempt_outcome_check
    CHECK (VALUE IN ('authorized', 'declined', 'refused')) NOT VALID;
ALTER TABLE charge_attempts ADD CONSTRAINT charge_attempts_tenant_id_charge_id_psp_key UNIQUE (tenant_id, charge_id, psp);
DROP INDEX CONCURRENTLY IF EXISTS charge_attempts_open_per_psp;
ALTER TABLE charge_attempts DROP COLUMN IF EXISTS psp_reference;
