-- +goose Up
-- Tenants own everything else. tenant_id leads every primary and foreign key
-- of the tenant tables so that a later move to a distributed PostgreSQL
-- (distributed by tenant_id) needs no change of keys.
CREATE TABLE tenants (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL UNIQUE CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a secret key is stored: a leaked table does not leak
-- credentials. The hash is unique across tenants because a bearer token alone
-- names its tenant.
CREATE TABLE api_keys (
    tenant_id  bigint      NOT NULL REFERENCES tenants (id),
    key_hash   bytea       NOT NULL CHECK (length(key_hash) = 32),
    prefix     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key_hash)
);
CREATE UNIQUE INDEX api_keys_key_hash ON api_keys (key_hash);

-- +goose Down
DROP TABLE api_keys;
DROP TABLE tenants;
