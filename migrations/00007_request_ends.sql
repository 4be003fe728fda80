-- +goose Up
-- Every request ends: done (its answer stored), or needs_attention (handed to
-- an operator after GIVE_UP_AFTER of failed attempts, with last_error as the
-- reason). A needs_attention key has no lease and no next attempt: neither a
-- client's retry nor the reaper sends anything for it; only an operator's
-- `requests retry` or `requests resolve` moves it on.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_state_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_state_check
    CHECK (state IN ('started', 'done', 'needs_attention'));

-- object_id names what the request created (a charge id), written by the
-- operation in the transaction that creates the object, so that the tenant's
-- view of a key can point at it without the key table knowing what it is.
ALTER TABLE idempotency_keys ADD COLUMN object_id text;

-- The reaper picks due keys: started, lease free and next attempt due. This
-- index holds unfinished keys only (a handful, or during an outage many, but
-- never the millions of finished ones), ordered by the moment each becomes
-- due, so the reaper's query reads exactly the rows it takes and stays cheap
-- however many keys are kept (docs/operations.md shows its plan).
CREATE INDEX idempotency_keys_due ON idempotency_keys
    ((greatest(coalesce(locked_until, '-infinity'::timestamptz), coalesce(next_attempt_at, '-infinity'::timestamptz))))
    WHERE state = 'started';

-- The operator's and the tenant's lists of unfinished work, and the retention
-- guard, read keys that are not done: a partial index keeps that cheap.
CREATE INDEX idempotency_keys_unfinished ON idempotency_keys (tenant_id, created_at) WHERE state <> 'done';

-- The tenant's list of its keys, newest first, paged by keyset on
-- (created_at, key): one index range per page, stable while keys are claimed.
CREATE INDEX idempotency_keys_tenant_created ON idempotency_keys (tenant_id, created_at DESC, key DESC);

-- An operator's settlement of a needs_attention request: who, when, as what,
-- why, and what the PSP said when it was looked up (NULL with --force). It
-- is an audit record, kept apart from the key table, whose partitions are
-- dropped after retention.
CREATE TABLE request_resolutions (
    tenant_id      bigint      NOT NULL,
    id             bigint      GENERATED ALWAYS AS IDENTITY,
    key            text        NOT NULL,
    key_created_at timestamptz NOT NULL,
    resolved_as    text        NOT NULL CHECK (resolved_as IN ('failed', 'succeeded')),
    reason         text        NOT NULL CHECK (reason <> ''),
    resolved_by    text        NOT NULL CHECK (resolved_by <> ''),
    forced         boolean     NOT NULL,
    psp_said       text,
    resolved_at    timestamptz NOT NULL DEFAULT phasepay_now(),
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX request_resolutions_key ON request_resolutions (tenant_id, key, key_created_at);

-- A charge the PSP refused (a final failure other than a decline) ends as
-- failed, with the PSP's reason.
ALTER TABLE charges DROP CONSTRAINT charges_status_check;
ALTER TABLE charges ADD CONSTRAINT charges_status_check
    CHECK (status IN ('pending', 'authorized', 'declined', 'failed'));
ALTER TABLE charges ADD COLUMN failure_reason text;

-- +goose Down
ALTER TABLE charges DROP COLUMN failure_reason;
ALTER TABLE charges DROP CONSTRAINT charges_status_check;
ALTER TABLE charges ADD CONSTRAINT charges_status_check CHECK (status IN ('pending', 'authorized', 'declined'));
DROP TABLE request_resolutions;
DROP INDEX idempotency_keys_tenant_created;
DROP INDEX idempotency_keys_unfinished;
DROP INDEX idempotency_keys_due;
ALTER TABLE idempotency_keys DROP COLUMN object_id;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_state_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_state_check CHECK (state IN ('started', 'done'));
