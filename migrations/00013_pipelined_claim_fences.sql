-- +goose Up

-- One database round trip per transaction.
--
-- The phase engine sends a transaction's statements, its BEGIN and COMMIT
-- included, in one pipelined exchange (internal/phases, pipeline.go). A
-- statement queued there has no result the code can look at before the
-- exchange, so every check that used to read a result (a fence's "rows
-- affected", a claim's "did I insert?") must instead fail the statement:
-- the error aborts the transaction, which rolls back whatever the exchange
-- held, and surfaces when the exchange is read. These functions are those
-- checks. Their SQLSTATEs are phasepay's own (class PP), mapped back to
-- idempotency.ErrLeaseLost and idempotency.ErrKeyExists at the storage edge.

-- phasepay_fence raises PPF01 when a fenced write matched no row: the lease
-- it was fenced by (lock_version) was taken over, released or finished. It
-- is called with the count of a data-modifying CTE's rows, which runs to
-- completion first (see idempotency.fenced).
-- +goose StatementBegin
CREATE FUNCTION phasepay_fence(matched bigint, what text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF matched = 0 THEN
        RAISE EXCEPTION 'lease lost: % matched no row', what USING ERRCODE = 'PPF01';
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- idempotency_keys_claim is claimSQL as a function the phase engine can
-- pipeline (idempotency.Store.QueueClaim): it returns the key's row,
-- inserted or found, and records which in the transaction-local setting
-- phasepay.claim ('created' or 'exists'), for phasepay_claimed below.
--
-- Uniqueness of (tenant_id, key) across day partitions is kept exactly as
-- claimSQL keeps it (migrations/00002, 00008): before inserting, the key's
-- advisory lock (same namespace and hash as idempotency.claimLockSQL),
-- then the lookup in a statement that starts after the lock was granted. A
-- VOLATILE plpgsql function takes a fresh snapshot for each statement it
-- runs, so the lookup sees a claim that committed while we waited for the
-- lock. READ COMMITTED is required for that, and checked.
-- +goose StatementBegin
CREATE FUNCTION idempotency_keys_claim(p_tenant_id bigint, p_key text, p_fingerprint bytea, p_method text,
                                       p_path text, p_body bytea, p_lease_us bigint, p_trace_context text,
                                       p_point text, p_object_id text)
RETURNS SETOF idempotency_keys
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    found_row idempotency_keys;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'claim %: needs a READ COMMITTED transaction, got %', p_key, current_setting('transaction_isolation');
    END IF;
    -- A key that exists is found without the lock: a committed row does
    -- not stop existing (retention drops keys past every retry), the lock
    -- would not make the row any fresher (the writes after the claim do
    -- not take it), and a takeover decided on the row is fenced by its
    -- lock_version. A replay thus takes no lock. The miss of a new key is
    -- one probe of the heads before the lock.
    SELECT * INTO found_row FROM idempotency_keys_newest(p_tenant_id, p_key);
    IF NOT FOUND THEN
        PERFORM pg_advisory_xact_lock(1886388225, hashtext(p_tenant_id::text || ':' || p_key));
        SELECT * INTO found_row FROM idempotency_keys_newest(p_tenant_id, p_key);
    END IF;
    IF FOUND THEN
        PERFORM set_config('phasepay.claim', 'exists', true);
        RETURN NEXT found_row;
        RETURN;
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

-- phasepay_claimed raises PPK01 (idempotency.ErrKeyExists) unless the
-- transaction's claim created its key. The engine queues it right after
-- the claim and before the first phase's writes: for a key that exists,
-- the claim's row has been read (it answers a replay) and the failure
-- rolls back everything after it, in the same exchange, with no ROLLBACK
-- of its own. (The server logs the failure as an ERROR: one line per
-- replay, mismatch or 409.)
-- +goose StatementBegin
CREATE FUNCTION phasepay_claimed() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('phasepay.claim', true) IS DISTINCT FROM 'created' THEN
        RAISE EXCEPTION 'the key exists' USING ERRCODE = 'PPK01';
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION phasepay_claimed();
DROP FUNCTION idempotency_keys_claim(bigint, text, bytea, text, text, bytea, bigint, text, text, text);
DROP FUNCTION phasepay_fence(bigint, text);
