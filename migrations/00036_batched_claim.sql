-- +goose Up

-- idempotency_keys_claim_many claims many new keys in one statement: the
-- set-based form of idempotency_keys_claim (migrations/00024), for the
-- phase engine's batches of concurrent claims (internal/phases/batch.go,
-- internal/sqlbatch).
--
-- Uniqueness across day partitions is kept as the one-key claim keeps it:
-- every key's advisory lock first, then the lookup through the heads in a
-- statement that starts after the locks were granted. The locks are taken
-- in the order of their lock ids, so that two batches sharing keys (the
-- engine keeps a key out of two places in one batch, not out of two lanes)
-- wait for each other rather than deadlock; a one-key claim holds one lock
-- and cannot close a cycle.
--
-- It creates every key or none. A key that exists is the one-key claim's
-- decision (a replay, a conflict, a mismatch), made by reading the row: it
-- fails the whole statement with PPK02, the engine runs each request of
-- the batch alone, and each meets its own answer there. With the fast path
-- in front (a replay is read before any claim), only a duplicate arriving
-- while its original is being claimed gets here.
--
-- Rows come back in the order of the arrays, which is the engine's rule
-- for a set-based form (sqlbatch). phasepay.claim is set to 'created' for
-- the check that follows in the batch (phasepay_claimed).
-- +goose StatementBegin
CREATE FUNCTION idempotency_keys_claim_many(p_tenant_id bigint[], p_key text[], p_fingerprint bytea[], p_method text[],
                                            p_path text[], p_body bytea[], p_lease_us bigint[], p_trace_context text[],
                                            p_point text[], p_object_id text[], p_operation text[], p_holder text[],
                                            p_timeline text[], p_lease_token uuid[])
RETURNS SETOF idempotency_keys
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    taken text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'claim: needs a READ COMMITTED transaction, got %', current_setting('transaction_isolation');
    END IF;
    PERFORM pg_advisory_xact_lock(1886388225, l.id)
       FROM (SELECT hashtext(t::text || ':' || k) AS id
               FROM unnest(p_tenant_id, p_key) AS u(t, k)
              ORDER BY 1) AS l;
    -- A statement of its own, after the locks: its snapshot is fresh. A
    -- head whose day was dropped has no row and does not count.
    SELECT u.k INTO taken
      FROM unnest(p_tenant_id, p_key) AS u(t, k)
     WHERE EXISTS (SELECT 1
                     FROM idempotency_key_heads h
                     JOIN idempotency_keys r ON r.tenant_id = h.tenant_id AND r.key = h.key AND r.created_at = h.created_at
                    WHERE h.tenant_id = u.t AND h.key = u.k)
     LIMIT 1;
    IF taken IS NOT NULL THEN
        RAISE EXCEPTION 'claim of many: key % exists', taken USING ERRCODE = 'PPK02';
    END IF;
    PERFORM set_config('phasepay.claim', 'created', true);
    RETURN QUERY
    WITH input AS (
        SELECT * FROM unnest(p_tenant_id, p_key, p_fingerprint, p_method, p_path, p_body, p_lease_us, p_trace_context,
                             p_point, p_object_id, p_operation, p_holder, p_timeline, p_lease_token)
                 WITH ORDINALITY
                 AS u(t, k, fingerprint, method, path, body, lease_us, trace_context, point, object_id, operation, holder,
                      timeline, lease_token, n)
    ), ins AS (
        INSERT INTO idempotency_keys
               (tenant_id, key, fingerprint, request_method, request_path, request_body, locked_until, trace_context,
                recovery_point, object_id, operation, holder, timeline, lease_token)
        SELECT t, k, fingerprint, method, path, body,
               phasepay_now() + lease_us * interval '1 microsecond', nullif(trace_context, ''),
               point, nullif(object_id, ''), nullif(operation, ''), holder, phasepay_timeline_append(NULL, timeline, 1),
               lease_token
          FROM input
         ORDER BY n
        RETURNING *
    )
    SELECT ins.* FROM ins JOIN input ON input.t = ins.tenant_id AND input.k = ins.key ORDER BY input.n;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION idempotency_keys_claim_many(bigint[], text[], bytea[], text[], text[], bytea[], bigint[], text[], text[],
                                          text[], text[], text[], text[], uuid[]);
