-- +goose Up
-- The secret new charge and refund ids are derived under (internal/charges,
-- ids.go): HMAC-SHA256 over the tenant, the idempotency key, the request's
-- fingerprint and the key's incarnation, so that a retry whose claim was
-- lost in a failover (asynchronous replication) derives the same id, hence
-- the same PSP key, and the PSP recognises the repeat. Written once, here,
-- long before any failover it must survive, and read once per process.
-- gen_random_uuid() draws from the server's strong random source: two of
-- them make 32 bytes (244 random bits).
CREATE TABLE object_id_secret (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    secret   bytea   NOT NULL CHECK (length(secret) = 32)
);
INSERT INTO object_id_secret (secret)
VALUES (decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

-- +goose Down
DROP TABLE object_id_secret;
