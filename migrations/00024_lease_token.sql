-- +goose Up

-- A token per lease: a random value the claim, and every takeover, draws
-- before it sends its statement and writes with the lease it takes.
--
-- A run whose claim or takeover answer is lost (the connection dropped after
-- the server committed it, a statement or lock timeout, a request deadline)
-- cannot know whether it holds the key, and gives the lease up once the
-- database answers, so that the client's retry is not kept waiting for a
-- whole lease (pitfall C11 "A claim whose answer was lost", pitfall C13 "A
-- lost takeover answer that holds the key"). That release must end only a
-- lease this very claim or takeover took. What it matched before did not say
-- so: the holder names a process, which all its requests share (a duplicate
-- of a running request, in the same process, whose claim was cut, released
-- the running request's lease mid-PSP-call), and is NULL with TIMELINE=off
-- (where the release then found nothing). Nothing already unique per claim
-- is known before its answer: created_at is the database's clock, read back
-- with the answer that was lost, and trace_context is absent without
-- tracing. Hence this column, matched by the release alone; no other write
-- reads it (lock_version fences them).
--
-- ADD COLUMN without a default is a catalog change: no rewrite, no scan,
-- and the day partitions get the column with their parent (those created
-- later copy it: CREATE TABLE … LIKE idempotency_keys).
ALTER TABLE idempotency_keys ADD COLUMN lease_token uuid;

-- idempotency_keys_claim, fifth version: as the fourth
-- (migrations/00022), and a new key's row records the claim's lease token.
-- The fourth stays beside it, for processes that run until they are
-- replaced; a later migration may drop it.
-- +goose StatementBegin
CREATE FUNCTION idempotency_keys_claim(p_tenant_id bigint, p_key text, p_fingerprint bytea, p_method text,
                                       p_path text, p_body bytea, p_lease_us bigint, p_trace_context text,
                                       p_point text, p_object_id text, p_operation text, p_holder text, p_timeline text,
                                       p_lease_token uuid)
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
            recovery_point, object_id, operation, holder, timeline, lease_token)
    VALUES (p_tenant_id, p_key, p_fingerprint, p_method, p_path, p_body,
            phasepay_now() + p_lease_us * interval '1 microsecond', nullif(p_trace_context, ''),
            p_point, nullif(p_object_id, ''), nullif(p_operation, ''), p_holder, phasepay_timeline_append(NULL, p_timeline, 1),
            p_lease_token)
    RETURNING *;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION idempotency_keys_claim(bigint, text, bytea, text, text, bytea, bigint, text, text, text, text, text, text, uuid);
ALTER TABLE idempotency_keys DROP COLUMN lease_token;
