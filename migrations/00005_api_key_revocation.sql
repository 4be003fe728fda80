-- +goose Up
-- Every key gets a public id, the name an operator lists and revokes it by
-- (`api keys list`, `api keys revoke`) without ever handling its secret or
-- hash, and a revocation time. A revoked key keeps its row, so that which key
-- made which request stays answerable, but authenticates nothing. The
-- default gives the keys made before this migration an id too; new keys take
-- it as well.
ALTER TABLE api_keys
    ADD COLUMN id text NOT NULL DEFAULT ('key_' || left(md5(gen_random_uuid()::text), 20)),
    ADD COLUMN revoked_at timestamptz;
-- api_keys is a reference table (docs/scaling.md), looked up before the
-- tenant is known, so this unique index need not lead with tenant_id.
CREATE UNIQUE INDEX api_keys_id ON api_keys (id);

-- A listing shows at most 8 characters of a key (the contract); keys made
-- before this migration stored 9 ("sk_" and 6 hex). The prefix only helps a
-- human tell keys apart, so cutting it loses nothing.
UPDATE api_keys SET prefix = left(prefix, 8) WHERE length(prefix) > 8;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_prefix_length CHECK (length(prefix) <= 8);

-- +goose Down
ALTER TABLE api_keys DROP CONSTRAINT api_keys_prefix_length;
DROP INDEX api_keys_id;
ALTER TABLE api_keys DROP COLUMN revoked_at, DROP COLUMN id;
