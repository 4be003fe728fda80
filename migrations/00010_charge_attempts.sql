-- +goose Up
-- Routing between PSPs: every authorization attempt of a charge, one row per
-- PSP it was sent to, written BEFORE the call in the fenced transaction of
-- the arrow before it (the charge's creation for the first, the refusal of
-- the previous PSP for the next). After a crash or a takeover these rows
-- are the complete list of PSPs that may hold an authorization for the
-- charge: each is looked up by reference before anything else is sent.
--
-- n counts the attempts from 1; psp_key is the idempotency key sent
-- (<charge>:authorize in single-PSP mode, <charge>:authorize:<n> with
-- PSPS); outcome is null while the attempt's answer is unknown or not yet
-- committed, and written with the answer: authorized, declined, or refused
-- (a final failure that did nothing at the PSP, the only outcome after
-- which the charge moves on to attempt n+1 at another PSP).
-- UNIQUE (tenant_id, charge_id, psp): a charge is never sent to one PSP
-- under two attempts. No foreign key to charges: the row is written in the
-- charge's own transaction, and a key per insert is a lock per insert.
CREATE TABLE charge_attempts (
    tenant_id  bigint      NOT NULL,
    charge_id  text        NOT NULL,
    n          integer     NOT NULL CHECK (n >= 1),
    psp        text        NOT NULL,
    psp_key    text        NOT NULL,
    outcome    text        CHECK (outcome IN ('authorized', 'declined', 'refused')),
    created_at timestamptz NOT NULL DEFAULT phasepay_now(),
    ended_at   timestamptz,
    PRIMARY KEY (tenant_id, charge_id, n),
    UNIQUE (tenant_id, charge_id, psp)
);

-- +goose Down
DROP TABLE charge_attempts;
