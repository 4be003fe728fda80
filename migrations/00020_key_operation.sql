-- +goose Up

-- Every key names the operation that runs it (phases.Operation's Name),
-- stored by its claim: a takeover (the reaper, or a client's retry after a
-- crash) resumes the key with the operation registered under that name.
--
-- Until now the engine found the operation by pattern-matching the key's
-- request path against every registered operation's path. That tied a
-- stored key to the spelling of today's routes (a route renamed or a
-- second operation on one path would send old keys to the wrong code) and
-- made "which code resumes this key?" a search instead of a column. A name
-- is stable by rule: an operation is never renamed while it may have
-- unfinished keys.
ALTER TABLE idempotency_keys ADD COLUMN operation text;

-- The keys claimed before this migration: their operation, from their
-- path, as the engine used to find it. (A key finished in its claim's own
-- transaction, a webhook endpoint's, is never resumed; it is named all the
-- same, for the operator views.)
UPDATE idempotency_keys
   SET operation = CASE
         WHEN request_path = '/v1/charges' THEN 'charges.create'
         WHEN request_path ~ '^/v1/charges/[^/]+/capture$' THEN 'charges.capture'
         WHEN request_path ~ '^/v1/charges/[^/]+/void$' THEN 'charges.void'
         WHEN request_path = '/v1/refunds' THEN 'refunds.create'
         WHEN request_path = '/v1/webhook_endpoints' THEN 'webhook_endpoints.create'
       END
 WHERE operation IS NULL;

-- idempotency_keys_claim, third version: as the second
-- (migrations/00016), storing the operation's name (p_operation). The old
-- signature goes, so that no claim can leave a key without one.
DROP FUNCTION idempotency_keys_claim(bigint, text, bytea, text, text, bytea, bigint, text, text, text);

-- +goose StatementBegin
CREATE FUNCTION idempotency_keys_claim(p_tenant_id bigint, p_key text, p_fingerprint bytea, p_method text,
                                       p_path text, p_body bytea, p_lease_us bigint, p_trace_context text,
                                       p_point text, p_object_id text, p_operation text)
RETURNS SETOF idempotency_keys
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    head      timestamptz;
    found_row idempotency_keys;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'claim %: needs a READ COMMITTED transaction, got %', p_key, current_setting('transaction_isolation');
    END IF;
    PERFORM pg_advisory_xact_lock(1886388225, hashtext(p_tenant_id::text || ':' || p_key));
    -- Statements of their own, after the lock: their snapshots are fresh
    -- (see migrations/00016: the order is what keeps a key unique).
    SELECT created_at INTO head FROM idempotency_key_heads
     WHERE tenant_id = p_tenant_id AND key = p_key
     ORDER BY created_at DESC LIMIT 1;
    IF head IS NOT NULL THEN
        -- No row when the head's day was dropped: the key is claimed anew.
        SELECT * INTO found_row FROM idempotency_keys
         WHERE tenant_id = p_tenant_id AND key = p_key AND created_at = head;
        IF FOUND THEN
            PERFORM set_config('phasepay.claim', 'exists', true);
            RETURN NEXT found_row;
            RETURN;
        END IF;
    END IF;
    PERFORM set_config('phasepay.claim', 'created', true);
    RETURN QUERY
    INSERT INTO idempotency_keys
           (tenant_id, key, fingerprint, request_method, request_path, request_body, locked_until, trace_context,
            recovery_point, object_id, operation)
    VALUES (p_tenant_id, p_key, p_fingerprint, p_method, p_path, p_body,
            phasepay_now() + p_lease_us * interval '1 microsecond', nullif(p_trace_context, ''),
            p_point, nullif(p_object_id, ''), nullif(p_operation, ''))
    RETURNING *;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION idempotency_keys_claim(bigint, text, bytea, text, text, bytea, bigint, text, text, text, text);

-- +goose StatementBegin
CREATE FUNCTION idempotency_keys_claim(p_tenant_id bigint, p_key text, p_fingerprint bytea, p_method text,
                                       p_path text, p_body bytea, p_lease_us bigint, p_trace_context text,
                                       p_point text, p_object_id text)
RETURNS SETOF idempotency_keys
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    head      timestamptz;
    found_row idempotency_keys;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'claim %: needs a READ COMMITTED transaction, got %', p_key, current_setting('transaction_isolation');
    END IF;
    PERFORM pg_advisory_xact_lock(1886388225, hashtext(p_tenant_id::text || ':' || p_key));
    SELECT created_at INTO head FROM idempotency_key_heads
     WHERE tenant_id = p_tenant_id AND key = p_key
     ORDER BY created_at DESC LIMIT 1;
    IF head IS NOT NULL THEN
        SELECT * INTO found_row FROM idempotency_keys
         WHERE tenant_id = p_tenant_id AND key = p_key AND created_at = head;
        IF FOUND THEN
            PERFORM set_config('phasepay.claim', 'exists', true);
            RETURN NEXT found_row;
            RETURN;
        END IF;
    END IF;
    PERFORM set_config('phasepay.claim', 'created', true);
    RETURN QUERY
    INSERT INTO idempotency_keys
           (tenant_id, key, fingerprint, request_method, request_path, request_body, locked_until, trace_context,
            recovery_point, object_id)
    VALUES (p_tenant_id, p_key, p_fingerprint, p_method, p_path, p_body,
            phasepay_now() + p_lease_us * interval '1 microsecond', nullif(p_trace_context, ''),
            p_point, nullif(p_object_id, ''))
    RETURNING *;
END
$$;
-- +goose StatementEnd

ALTER TABLE idempotency_keys DROP COLUMN operation;
