-- +goose Up

-- A timeline per request: what happened to a key, in order, recorded with
-- the key itself (docs/operations.md, "A request's timeline").
--
-- timeline is a JSON array of entries, one per moment of the request's
-- life: claimed, reached (a recovery point), released (the reason, the next
-- attempt), taken_over (by an api process or a reaper), psp_call (the PSP,
-- the operation, its key, the outcome class, the status, how long it took)
-- and finished (the stored answer's status). Each entry is appended by the
-- very statement that makes the change it records (the claim's INSERT,
-- Advance, Finish, Release, TakeOver; a PSP call's entry rides in the
-- statement of the transaction that follows the call), so it costs no
-- statement of its own, commits or rolls back with its change, and is
-- dropped with its day's partition (retention). Events written and webhook
-- delivery attempts are not copied here: they are read from their own
-- tables at read time (internal/timeline).
--
-- holder is who holds the key right now: the holder of its lease, set by
-- the claim and each takeover, cleared by a release or the finish. A holder
-- names a process: <role>:<host>:<pid>:<8 hex digits drawn at its start>,
-- role api, reaper or operator. It is for operators only, never shown to a
-- tenant.
--
-- ADD COLUMN without a default is a catalog change: no rewrite, no scan,
-- and the day partitions get the columns with their parent (those created
-- later copy them: CREATE TABLE … LIKE idempotency_keys).
ALTER TABLE idempotency_keys ADD COLUMN timeline jsonb, ADD COLUMN holder text;

-- phasepay_timeline_time formats a time as every timeline entry writes it:
-- RFC 3339 in UTC, to the microsecond.
-- +goose StatementBegin
CREATE FUNCTION phasepay_timeline_time(t timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;
-- +goose StatementEnd

-- phasepay_timeline_append appends entries, a JSON array made by the
-- process, to a key's timeline, stamping each entry with the two values
-- only the database knows when the statement runs: "at", the database's
-- clock (phasepay_now(), the transaction's start, the same instant as the
-- created_at of an event the transaction writes), and "lock_version", the
-- key's fencing token as the statement leaves it. The process writes both
-- as null, first in each entry ({"at":null,"lock_version":null,…});
-- encoding/json escapes every quote inside a string value, so the two
-- patterns replaced below occur nowhere else. A text replace before one
-- jsonb parse costs about half of stamping each element with jsonb
-- operators (jsonb_array_elements, jsonb_agg), and this runs in the claim
-- and the finish of every request.
--
-- NULL entries leave the timeline as it is: TIMELINE=off (make bench's
-- comparison) records nothing.
--
-- A LANGUAGE sql function of one expression: the planner inlines it.
-- +goose StatementBegin
CREATE FUNCTION phasepay_timeline_append(timeline jsonb, entries text, lock_version bigint) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN entries IS NULL THEN timeline
                ELSE coalesce(timeline, '[]'::jsonb)
                     || replace(replace(entries,
                                        '"at":null', '"at":"' || phasepay_timeline_time(phasepay_now()) || '"'),
                                '"lock_version":null', '"lock_version":' || lock_version)::jsonb
           END
$$;
-- +goose StatementEnd

-- idempotency_keys_claim, fourth version: as the third (migrations/00020),
-- and a new key's row records its holder and the first entries of its
-- timeline (claimed, and reached for the point its first phases commit
-- with the claim), in the INSERT itself. An existing key is returned as
-- before, and nothing of it changes.
DROP FUNCTION idempotency_keys_claim(bigint, text, bytea, text, text, bytea, bigint, text, text, text, text);
-- +goose StatementBegin
CREATE FUNCTION idempotency_keys_claim(p_tenant_id bigint, p_key text, p_fingerprint bytea, p_method text,
                                       p_path text, p_body bytea, p_lease_us bigint, p_trace_context text,
                                       p_point text, p_object_id text, p_operation text, p_holder text, p_timeline text)
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
            recovery_point, object_id, operation, holder, timeline)
    VALUES (p_tenant_id, p_key, p_fingerprint, p_method, p_path, p_body,
            phasepay_now() + p_lease_us * interval '1 microsecond', nullif(p_trace_context, ''),
            p_point, nullif(p_object_id, ''), nullif(p_operation, ''), p_holder, phasepay_timeline_append(NULL, p_timeline, 1))
    RETURNING *;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION idempotency_keys_claim(bigint, text, bytea, text, text, bytea, bigint, text, text, text, text, text, text);
-- The third version, as migrations/00020 created it.
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
            recovery_point, object_id, operation)
    VALUES (p_tenant_id, p_key, p_fingerprint, p_method, p_path, p_body,
            phasepay_now() + p_lease_us * interval '1 microsecond', nullif(p_trace_context, ''),
            p_point, nullif(p_object_id, ''), nullif(p_operation, ''))
    RETURNING *;
END
$$;
-- +goose StatementEnd
DROP FUNCTION phasepay_timeline_append(jsonb, text, bigint);
DROP FUNCTION phasepay_timeline_time(timestamptz);
ALTER TABLE idempotency_keys DROP COLUMN timeline, DROP COLUMN holder;
