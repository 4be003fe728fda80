-- +goose Up
-- A charge is created by the first atomic phase of POST /v1/charges and
-- belongs to exactly one idempotency-key incarnation: the UNIQUE constraint is
-- the database's own guarantee that a resumed or raced request can never
-- create a second charge row for one key. The key's created_at is part of it
-- because a key forgotten after retention may be used again for a new intent.
-- There is no foreign key to idempotency_keys: keys are dropped with their
-- partitions while charges are kept.
CREATE TABLE charges (
    tenant_id                  bigint      NOT NULL REFERENCES tenants (id),
    id                         text        NOT NULL CHECK (id LIKE 'ch\_%'),
    idempotency_key            text        NOT NULL,
    idempotency_key_created_at timestamptz NOT NULL,
    amount                     bigint      NOT NULL CHECK (amount > 0),
    currency                   text        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    payment_method             text        NOT NULL,
    description                text,
    metadata                   jsonb       NOT NULL DEFAULT '{}',
    status                     text        NOT NULL CHECK (status IN ('pending', 'authorized', 'declined')),
    psp_reference              text,
    decline_code               text,
    created_at                 timestamptz NOT NULL DEFAULT phasepay_now(),
    updated_at                 timestamptz NOT NULL DEFAULT phasepay_now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, idempotency_key, idempotency_key_created_at)
);

-- +goose Down
DROP TABLE charges;
