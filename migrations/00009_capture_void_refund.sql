-- +goose Up
-- The rest of a payment's life: capture, void and refund. The money
-- invariants live here, in constraints, and in the row lock every one of
-- these operations takes on its charge before it decides anything, never in
-- a process's memory: two api processes racing on one charge meet at the
-- charge row.
ALTER TABLE charges DROP CONSTRAINT charges_status_check;
ALTER TABLE charges ADD CONSTRAINT charges_status_check
    CHECK (status IN ('pending', 'authorized', 'declined', 'failed', 'captured', 'voided'));

-- settlement is the one capture or void a charge may have, claimed by the
-- first arrow of the request that wins the charge's row lock and written in
-- the same transaction: a second capture or void finds it set and is turned
-- away (400), whatever its idempotency key. It is cleared only when the PSP
-- refused the settlement outright (nothing done there).
-- amount_refunding is the sum of the pending refunds: reserved by a refund's
-- first arrow, so that refunds in flight and refunds done together never
-- exceed what was captured (the CHECK below is the last word on it).
-- psp names the PSP that holds the authorization ("default" with PSP_URL).
ALTER TABLE charges
    ADD COLUMN settlement       text   CHECK (settlement IN ('capture', 'void')),
    ADD COLUMN amount_captured  bigint NOT NULL DEFAULT 0,
    ADD COLUMN amount_refunded  bigint NOT NULL DEFAULT 0,
    ADD COLUMN amount_refunding bigint NOT NULL DEFAULT 0,
    ADD COLUMN psp              text   NOT NULL DEFAULT 'default',
    ADD CONSTRAINT charges_amounts_check CHECK (
        amount_captured BETWEEN 0 AND amount
        AND amount_refunded >= 0 AND amount_refunding >= 0
        AND amount_refunded + amount_refunding <= amount_captured),
    ADD CONSTRAINT charges_settled_check CHECK (
        (status = 'captured') = (settlement IS NOT DISTINCT FROM 'capture' AND amount_captured > 0)
        AND (status <> 'voided' OR settlement IS NOT DISTINCT FROM 'void'));

-- GET /v1/charges, newest first, paged by keyset on (created_at, id).
CREATE INDEX charges_tenant_created ON charges (tenant_id, created_at DESC, id DESC);

-- A refund belongs to one charge and to one idempotency-key incarnation,
-- like a charge (the UNIQUE constraint: a resumed or raced request can
-- never create two refunds for one key).
CREATE TABLE refunds (
    tenant_id                  bigint      NOT NULL,
    id                         text        NOT NULL CHECK (id LIKE 're\_%'),
    charge_id                  text        NOT NULL,
    idempotency_key            text        NOT NULL,
    idempotency_key_created_at timestamptz NOT NULL,
    amount                     bigint      NOT NULL CHECK (amount > 0),
    status                     text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    psp_reference              text,
    failure_reason             text,
    created_at                 timestamptz NOT NULL DEFAULT phasepay_now(),
    updated_at                 timestamptz NOT NULL DEFAULT phasepay_now(),
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, charge_id) REFERENCES charges (tenant_id, id),
    UNIQUE (tenant_id, idempotency_key, idempotency_key_created_at)
);

-- GET /v1/refunds?charge=, newest first, paged by keyset on (created_at, id);
-- and GET /v1/refunds without a charge.
CREATE INDEX refunds_charge_created ON refunds (tenant_id, charge_id, created_at DESC, id DESC);
CREATE INDEX refunds_tenant_created ON refunds (tenant_id, created_at DESC, id DESC);

-- +goose Down
DROP TABLE refunds;
DROP INDEX charges_tenant_created;
ALTER TABLE charges DROP CONSTRAINT charges_settled_check, DROP CONSTRAINT charges_amounts_check,
    DROP COLUMN psp, DROP COLUMN amount_refunding, DROP COLUMN amount_refunded, DROP COLUMN amount_captured,
    DROP COLUMN settlement;
ALTER TABLE charges DROP CONSTRAINT charges_status_check;
ALTER TABLE charges ADD CONSTRAINT charges_status_check
    CHECK (status IN ('pending', 'authorized', 'declined', 'failed'));
