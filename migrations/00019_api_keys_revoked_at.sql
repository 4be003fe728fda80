-- +goose Up

-- An api process that reaches PostgreSQL only through a transaction pooler
-- cannot LISTEN for revocations (a LISTEN lives in its session, which the
-- pooler hands to others after each transaction): it polls the last
-- minutes' revocations several times a second instead
-- (tenants.recentRevocationsSQL). This index makes each poll read the few
-- recent revocations rather than every key. Partial: keys that work, nearly
-- all of them, are not in it.
CREATE INDEX api_keys_revoked_at ON api_keys (revoked_at) WHERE revoked_at IS NOT NULL;

-- +goose Down
DROP INDEX api_keys_revoked_at;
