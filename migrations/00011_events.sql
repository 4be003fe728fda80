-- +goose Up

-- Events and webhooks through a transactional outbox (internal/events,
-- internal/webhooks). An event is written in the transaction of the status
-- change that causes it, together with one delivery row per webhook
-- endpoint subscribed at that moment: the outbox. Deliverers (bin/reaper)
-- send what the outbox holds, at least once.
--
-- events, webhook_deliveries and webhook_attempts are range-partitioned by
-- the event's created_at, one partition per UTC day, alike, so that
-- retention drops the three partitions of a day together (DETACH … then
-- DROP TABLE), never DELETEs row by row; a day that still holds a pending
-- delivery is kept (events.DropExpiredPartitions). tenant_id leads every
-- key, as everywhere.

-- phasepay_ensure_day_partitions is idempotency_keys_ensure_partitions
-- (migrations/00006) for any table partitioned by day on column col:
-- standalone tables LIKE the parent, with a CHECK constraint that is the
-- partition's range, attached with ATTACH PARTITION (SHARE UPDATE EXCLUSIVE
-- on the parent: neither readers nor writers wait), never CREATE TABLE …
-- PARTITION OF. Partitions are named <parent>_pYYYYMMDD.
-- +goose StatementBegin
CREATE FUNCTION phasepay_ensure_day_partitions(parent text, col text, from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day     date;
    part    text;
    lo      timestamptz;
    hi      timestamptz;
    created integer := 0;
BEGIN
    -- Serialise callers per parent (advisory namespace 0x70700011), so two
    -- never both try to create the same day.
    PERFORM pg_advisory_xact_lock(1886388241, hashtext(parent));
    FOR i IN 0 .. days - 1 LOOP
        day  := from_day + i;
        part := parent || '_p' || to_char(day, 'YYYYMMDD');
        lo   := day::timestamp AT TIME ZONE 'UTC';
        hi   := (day + 1)::timestamp AT TIME ZONE 'UTC';
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL, '
                       'CONSTRAINT %I CHECK (%I >= %L AND %I < %L))',
                       part, parent, part || '_range', col, lo, col, hi);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       parent, part, lo, hi);
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

-- webhook_endpoints: where a tenant wants its events sent. A deleted
-- endpoint keeps its row (deleted_at set): attempts for events written
-- before the DELETE may continue, and they are signed with its secret. The
-- secret is stored as is, because every delivery is signed with it; it is
-- shown to the tenant once, in the answer to its creation.
CREATE TABLE webhook_endpoints (
    tenant_id  bigint      NOT NULL REFERENCES tenants (id),
    id         text        NOT NULL,
    url        text        NOT NULL,
    events     text[]      NOT NULL CHECK (cardinality(events) > 0),
    secret     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT phasepay_now(),
    deleted_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
-- The tenant's list, newest first, keyset on (created_at, id).
CREATE INDEX webhook_endpoints_tenant_created ON webhook_endpoints (tenant_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;

-- events: the body is stored once, as the bytes every delivery sends and
-- GET /v1/events/{id} answers, so it is byte-identical everywhere. The id
-- carries created_at (evt_ + 14 hex digits of its microseconds since the
-- epoch + 16 random hex digits), so a lookup by id names its partition.
CREATE TABLE events (
    tenant_id  bigint      NOT NULL,
    id         text        NOT NULL,
    type       text        NOT NULL,
    created_at timestamptz NOT NULL,
    body       bytea       NOT NULL,
    PRIMARY KEY (tenant_id, id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX events_tenant_created ON events (tenant_id, created_at DESC, id DESC);
CREATE INDEX events_tenant_type_created ON events (tenant_id, type, created_at DESC, id DESC);

-- webhook_deliveries: one row per (event, endpoint subscribed when the event
-- was written). state pending until a 2xx (succeeded) or until it is given
-- up after 3 days (failed). A deliverer takes a due row with FOR UPDATE SKIP
-- LOCKED, bumps lock_version (its fencing token) and leases it
-- (locked_until) for longer than one attempt can last; its result is
-- recorded only under that token.
CREATE TABLE webhook_deliveries (
    tenant_id        bigint      NOT NULL,
    event_id         text        NOT NULL,
    event_created_at timestamptz NOT NULL,
    endpoint_id      text        NOT NULL,
    state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'succeeded', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT phasepay_now(),
    locked_until     timestamptz,
    lock_version     bigint      NOT NULL DEFAULT 0,
    last_error       text,
    finished_at      timestamptz,
    PRIMARY KEY (tenant_id, event_id, endpoint_id, event_created_at)
) PARTITION BY RANGE (event_created_at);
-- The deliverers' scan: pending rows by when they are due. Partial, so the
-- delivered ones (nearly all) cost it nothing. The expression is spelled
-- exactly as webhooks.dueAtExpr.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries
    ((greatest(next_attempt_at, coalesce(locked_until, '-infinity'::timestamptz))))
    WHERE state = 'pending';

-- webhook_attempts: one row per HTTP attempt, what the tenant sees of each
-- (GET /v1/events/{id}/deliveries).
CREATE TABLE webhook_attempts (
    tenant_id        bigint      NOT NULL,
    event_id         text        NOT NULL,
    event_created_at timestamptz NOT NULL,
    endpoint_id      text        NOT NULL,
    attempt          integer     NOT NULL,
    attempted_at     timestamptz NOT NULL,
    status_code      integer,
    latency_ms       integer     NOT NULL,
    error            text,
    PRIMARY KEY (tenant_id, event_id, endpoint_id, attempt, event_created_at)
) PARTITION BY RANGE (event_created_at);

SELECT phasepay_ensure_day_partitions(t, c, (phasepay_now() AT TIME ZONE 'UTC')::date - 1, 5)
  FROM (VALUES ('events', 'created_at'), ('webhook_deliveries', 'event_created_at'),
               ('webhook_attempts', 'event_created_at')) AS p (t, c);

-- +goose Down
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE events;
DROP TABLE webhook_endpoints;
DROP FUNCTION phasepay_ensure_day_partitions(text, text, date, integer);
