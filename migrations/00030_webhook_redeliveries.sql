-- +goose Up

-- webhook_redeliveries audits every redelivery asked for: a tenant's
-- POST /v1/events/{id}/redeliver, an operator's `bin/api webhooks
-- redeliver` or the console's button. Each row says who asked (the
-- tenant, or the operator's name), when, through what, for which event
-- (and endpoint) or which endpoint and window of events, and how many
-- deliveries it made due. A redelivery changes webhook_deliveries in the
-- same transaction as its row: no redelivery without its record.
--
-- One row per act, a handful a day: not partitioned, and kept (an audit).
-- A new table, created empty: nothing waits on it.
CREATE TABLE webhook_redeliveries (
    tenant_id    bigint      NOT NULL REFERENCES tenants (id),
    id           bigint      GENERATED ALWAYS AS IDENTITY,
    requested_at timestamptz NOT NULL DEFAULT phasepay_now(),
    requested_by text        NOT NULL CHECK (requested_by <> ''),
    via          text        NOT NULL CHECK (via IN ('api', 'cli', 'console')),
    event_id     text,
    endpoint_id  text,
    window_from  timestamptz,
    window_until timestamptz,
    deliveries   integer     NOT NULL CHECK (deliveries >= 0),
    PRIMARY KEY (tenant_id, id),
    -- One event (at every endpoint, or at endpoint_id), or one endpoint's
    -- events written in [window_from, window_until).
    CHECK (event_id IS NOT NULL OR (endpoint_id IS NOT NULL AND window_from < window_until))
);

-- The redeliveries of one event, for its request's timeline
-- (internal/timeline) and an operator's question "who re-sent this?".
CREATE INDEX webhook_redeliveries_event ON webhook_redeliveries (tenant_id, event_id) WHERE event_id IS NOT NULL;

-- +goose Down
DROP TABLE webhook_redeliveries;
