-- +goose Up

-- phasepay_now is the one clock every lease, expiry and partition decision is
-- made against: the database's, never a process's, so that workers whose
-- clocks drift still agree on who holds a lease. Tests move it by setting
-- phasepay.now on their connections; in production the setting is unset and
-- this is plain now() (the transaction's start time; our transactions are
-- short).
-- +goose StatementBegin
CREATE FUNCTION phasepay_now() RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(nullif(current_setting('phasepay.now', true), '')::timestamptz, now())
$$;
-- +goose StatementEnd

-- idempotency_keys holds one row per (tenant, key) incarnation: the request's
-- fingerprint and body, where its execution stands (recovery_point), who may
-- advance it (lock_version, the fencing token, and locked_until, the lease),
-- and once done the response to replay byte for byte.
--
-- It is range-partitioned by created_at, one partition per UTC day, so that
-- retention is DROP TABLE of a whole day rather than a DELETE that writes WAL
-- per row and leaves dead tuples for VACUUM.
--
-- Uniqueness of (tenant_id, key). PostgreSQL accepts a UNIQUE or PRIMARY KEY
-- constraint on a partitioned table only if it contains the partition key, so
-- the primary key below is (tenant_id, key, created_at) and by itself would
-- allow the same key once per distinct created_at, which is to the
-- microsecond: it blocks no duplicate at all, in the same partition or (a
-- retry one second after midnight) in the next one. Neither
-- obvious patch works: a partial unique index "WHERE created_at > now() - …"
-- is impossible (index predicates must be immutable), and a side table of
-- live keys would need row-by-row deletes, the very thing partitioning avoids.
--
-- So the claim (internal/idempotency, claimSQL) serialises on the key itself:
-- it takes pg_advisory_xact_lock on a hash of (tenant_id, key), then, in a
-- fresh READ COMMITTED snapshot, looks the key up in every partition (an index
-- probe per live day, a handful) and inserts only if none is found. Two
-- claims of one key wait for each other; the second sees the first's
-- committed row whichever day each falls on. A hash collision only makes two
-- unrelated keys wait for each other for the length of a claim.
-- TestClaimUniqueAcrossPartitionBoundary races claims either side of midnight.
CREATE TABLE idempotency_keys (
    tenant_id            bigint      NOT NULL REFERENCES tenants (id),
    key                  text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    created_at           timestamptz NOT NULL DEFAULT phasepay_now(),
    fingerprint          bytea       NOT NULL CHECK (length(fingerprint) = 32),
    request_method       text        NOT NULL,
    request_path         text        NOT NULL,
    -- The canonical request body: what a takeover (API retry or reaper)
    -- resumes from when the original request is gone.
    request_body         bytea       NOT NULL,
    state                text        NOT NULL DEFAULT 'started' CHECK (state IN ('started', 'done')),
    recovery_point       text        NOT NULL DEFAULT 'start',
    -- The fencing token: bumped by every takeover, required by every write a
    -- holder makes, so a worker that lost its lease cannot commit.
    lock_version         bigint      NOT NULL DEFAULT 1,
    -- The lease: NULL or in the past means anyone may take the key over.
    locked_until         timestamptz,
    -- Runs that ended without finishing (a released lease), for backoff.
    attempts             integer     NOT NULL DEFAULT 0,
    -- Earliest time the reaper will take the key over again (its backoff);
    -- a client retry does not wait for it.
    next_attempt_at      timestamptz,
    last_error           text,
    response_status      integer,
    response_content_type text,
    response_body        bytea,
    finished_at          timestamptz,
    PRIMARY KEY (tenant_id, key, created_at),
    CHECK ((state = 'done') = (response_status IS NOT NULL AND response_body IS NOT NULL))
) PARTITION BY RANGE (created_at);

-- The reaper's scan: started keys by lease expiry. Partial, so finished keys
-- (nearly all of them) cost it nothing.
CREATE INDEX idempotency_keys_started ON idempotency_keys (locked_until) WHERE state = 'started';

-- idempotency_keys_ensure_partitions creates the daily partitions for
-- [from_day, from_day + days) that do not exist yet and returns how many it
-- created. The migration, the API's start and the reaper all call it, so an
-- insert never fails for want of a partition even if no reaper ran. There is
-- deliberately no DEFAULT partition: rows there would block creating the
-- matching day, and DETACH … CONCURRENTLY refuses to run beside one.
-- +goose StatementBegin
CREATE FUNCTION idempotency_keys_ensure_partitions(from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day     date;
    part    text;
    created integer := 0;
BEGIN
    -- Two callers checking to_regclass at once would both try to create the
    -- same day and one would fail; serialise them (advisory namespace 0x70700002).
    PERFORM pg_advisory_xact_lock(1886388226, 0);
    FOR i IN 0 .. days - 1 LOOP
        day  := from_day + i;
        part := 'idempotency_keys_p' || to_char(day, 'YYYYMMDD');
        IF to_regclass(part) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF idempotency_keys FOR VALUES FROM (%L) TO (%L)',
                part, day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

SELECT idempotency_keys_ensure_partitions((phasepay_now() AT TIME ZONE 'UTC')::date - 1, 5);

-- +goose Down
DROP TABLE idempotency_keys;
DROP FUNCTION idempotency_keys_ensure_partitions(date, integer);
DROP FUNCTION phasepay_now();
