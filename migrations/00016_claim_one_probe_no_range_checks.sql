-- +goose Up

-- Less PostgreSQL CPU per new charge: the claim of a new key
-- probes the heads once instead of twice (1), and no attached partition
-- carries a CHECK that restates its bound (2).
--
-- idempotency_keys_newest stays the plpgsql function of migrations/00014.
-- Its machinery (SPI, RETURN QUERY through a tuplestore) costs more than
-- its two statements, so a LANGUAGE sql version, one SELECT that the
-- planner inlines, was measured again:
--
--     SELECT * FROM idempotency_keys
--      WHERE tenant_id = p_tenant_id AND key = p_key
--        AND created_at = (SELECT created_at FROM idempotency_key_heads
--                           WHERE tenant_id = p_tenant_id AND key = p_key
--                           ORDER BY created_at DESC LIMIT 1)
--
-- Inlined, it is pruned to the head's day only as the plan runs (the
-- subquery is an InitPlan: execution-time pruning), and PostgreSQL 15
-- still initialises the scan of every day partition the plan holds, all of
-- them in a generic plan, for a missing key too, where the plpgsql version
-- never starts its read of the row. Backend CPU per call, generic plans,
-- one client, medians of 5 alternating runs of 20,000 calls:
--
--     day partitions    existing key           missing key
--                       plpgsql   inlined      plpgsql   inlined
--     5                 0.044     0.037        0.031     0.043 ms
--     30                0.054     0.092        0.035     0.087 ms
--
-- A win of 0.007 ms per replay with the days of the default RETENTION,
-- paid for by a lookup whose cost grows with the days kept again
-- (pitfall Q3 "A claim that costs more for every day kept";
-- TestClaimCostIndependentOfPartitionCount, whose
-- missing key then locks every day): not taken.
--
-- 1. idempotency_keys_claim, second version: a new key costs one probe of
-- the heads, after the lock, instead of two (one before the lock, one
-- after it). The first version (migrations/00013) looked first without
-- the lock, so that a replay took none; a new key then paid two lookups
-- (2 × 0.048 ms), and new keys are the claim's common case: the phase
-- engine reads a key it has seen before with lookupSQL, and answers most
-- replays from that read, without a claim. A replay that does reach the
-- claim now waits for the key's lock while a claim of the same key holds
-- it, which is at most one claim transaction (the lock is
-- transaction-scoped). Backend CPU of a new key's BEGIN, claim and
-- ROLLBACK, 5 day partitions, generic plans, one client, medians of 9
-- alternating runs of 20,000: 0.207 ms (first version) against 0.181.
--
-- Uniqueness of (tenant_id, key) is kept exactly as before: the key's
-- advisory lock (same namespace and hash as idempotency.claimLockSQL),
-- then the lookup in statements that start after the lock was granted.
-- *Closes*: two claims of one key both finding nothing and both inserting.
-- The order is the point: a lookup before the lock can miss a claim that
-- commits while we wait for the lock; a lookup after it cannot, because a
-- VOLATILE plpgsql function takes a fresh snapshot for each statement it
-- runs (under READ COMMITTED, which is checked), so it sees every claim
-- that committed before the lock was granted to us.
--
-- The lookup is idempotency_keys_newest's two statements, written out
-- rather than called: a call would add a plpgsql call of its own (SPI, a
-- tuplestore for its row) to the one lookup. As in newest(), a new key
-- costs the heads probe alone, and only a key that has a head starts the
-- read of its row, whose plan (cached by plpgsql, generic under phasepay's
-- plan_cache_mode) prunes to the head's day when it starts. The answer is
-- newest()'s in every case: no head, or a head whose day was dropped, is
-- a new key; otherwise the row of the newest head.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION idempotency_keys_claim(p_tenant_id bigint, p_key text, p_fingerprint bytea, p_method text,
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
    -- Statements of their own, after the lock: their snapshots are fresh.
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
            recovery_point, object_id)
    VALUES (p_tenant_id, p_key, p_fingerprint, p_method, p_path, p_body,
            phasepay_now() + p_lease_us * interval '1 microsecond', nullif(p_trace_context, ''),
            p_point, nullif(p_object_id, ''))
    RETURNING *;
END
$$;
-- +goose StatementEnd

-- 2. No CHECK constraint on an attached partition restates its range.
--
-- The ensure functions (migrations/00006, 00008, 00011) build each
-- partition as a standalone table with a CHECK equal to its range, so that
-- ATTACH finds in the catalog that no row is out of range and skips its
-- validation scan. Once attached, the partition bound says the same, and
-- the CHECK only costs: every INSERT and UPDATE of keys, heads, events,
-- deliveries and attempts reads it back (stringToNode) and compiles it
-- (ExecConstraints: 11% of PostgreSQL's CPU in a perf profile of new
-- charges). 20,000 single-row INSERTs of heads in a plpgsql loop took
-- 0.015 ms each with the month's CHECK, 0.009 without (medians of 7
-- alternating runs). Nothing reads these CHECKs after the ATTACH:
--   * rows are routed by the bound, and a row out of range is refused by
--     the bound (partition constraint), checked on every direct insert or
--     update of a partition, CHECK or not;
--   * retention's DETACH … CONCURRENTLY adds a CHECK equal to the bound
--     when no constraint implies it, without a scan (marked valid), at the
--     end of the detach; the table is dropped right after;
--   * an ATTACH beside a DEFAULT partition scans the DEFAULT partition, or
--     skips that by the DEFAULT partition's own constraints, never by the
--     new partition's.
--
-- So each ensure function drops its CHECK right after the ATTACH, in the
-- same transaction (no other session ever sees the table with it), and the
-- partitions attached already drop theirs here: a catalog change, no scan,
-- but each takes ACCESS EXCLUSIVE on its partition until this migration
-- commits, so claims of today's partition wait for it, and it waits for
-- any long reader of a partition. Run it at a quiet time.


-- idempotency_keys_ensure_partitions, fourth version: as the third
-- (migrations/00008), and the day's CHECK goes once it is attached.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION idempotency_keys_ensure_partitions(from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day     date;
    part    text;
    lo      timestamptz;
    hi      timestamptz;
    def     regclass;
    held    boolean;
    created integer := 0;
BEGIN
    -- Two callers checking to_regclass at once would both try to create the
    -- same day and one would fail; serialise them (advisory namespace 0x70700002).
    PERFORM pg_advisory_xact_lock(1886388226, 0);
    SELECT nullif(partdefid, 0)::regclass INTO def
      FROM pg_partitioned_table WHERE partrelid = 'idempotency_keys'::regclass;
    FOR i IN 0 .. days - 1 LOOP
        day  := from_day + i;
        part := 'idempotency_keys_p' || to_char(day, 'YYYYMMDD');
        lo   := day::timestamp AT TIME ZONE 'UTC';
        hi   := (day + 1)::timestamp AT TIME ZONE 'UTC';
        PERFORM idempotency_key_heads_ensure_month(day);
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        IF def IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE created_at >= $1 AND created_at < $2)', def)
               INTO held USING lo, hi;
            IF held THEN
                RAISE WARNING 'idempotency_keys: day % not partitioned: the DEFAULT partition % holds its rows', day, def;
                CONTINUE;
            END IF;
        END IF;
        EXECUTE format('CREATE TABLE %I (LIKE idempotency_keys INCLUDING ALL, '
                       'CONSTRAINT %I CHECK (created_at >= %L AND created_at < %L))',
                       part, part || '_range', lo, hi);
        EXECUTE format('ALTER TABLE idempotency_keys ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       part, lo, hi);
        -- The CHECK has served (ATTACH skipped its scan); the bound says the same.
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

-- idempotency_key_heads_ensure_month, second version: as the first
-- (migrations/00008), and the month's CHECK goes once it is attached.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION idempotency_key_heads_ensure_month(day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    month date := date_trunc('month', day)::date;
    part  text := 'idempotency_key_heads_p' || to_char(month, 'YYYYMM');
    lo    timestamptz := month::timestamp AT TIME ZONE 'UTC';
    hi    timestamptz := (month + interval '1 month')::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass(part) IS NOT NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE idempotency_key_heads INCLUDING ALL, '
                   'CONSTRAINT %I CHECK (created_at >= %L AND created_at < %L))',
                   part, part || '_range', lo, hi);
    EXECUTE format('ALTER TABLE idempotency_key_heads ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   part, lo, hi);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
    RETURN 1;
END
$$;
-- +goose StatementEnd

-- phasepay_ensure_day_partitions, second version: as the first
-- (migrations/00011), and each day's CHECK goes once it is attached.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION phasepay_ensure_day_partitions(parent text, col text, from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day     date;
    part    text;
    lo      timestamptz;
    hi      timestamptz;
    created integer := 0;
BEGIN
    -- Serialise callers per parent (advisory namespace 0x70700011), so two
    -- never both try to create the same day.
    PERFORM pg_advisory_xact_lock(1886388241, hashtext(parent));
    FOR i IN 0 .. days - 1 LOOP
        day  := from_day + i;
        part := parent || '_p' || to_char(day, 'YYYYMMDD');
        lo   := day::timestamp AT TIME ZONE 'UTC';
        hi   := (day + 1)::timestamp AT TIME ZONE 'UTC';
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL, '
                       'CONSTRAINT %I CHECK (%I >= %L AND %I < %L))',
                       part, parent, part || '_range', col, lo, col, hi);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       parent, part, lo, hi);
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

-- The partitions attached already: every partition of a partitioned table
-- whose CHECK is named after it as the ensure functions name theirs
-- (<partition>_range; only those functions make such names). Partitions
-- with a DETACH … CONCURRENTLY pending are left as they are: retention
-- finishes and drops them.
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT c.oid::regclass AS part, k.conname
          FROM pg_inherits i
          JOIN pg_partitioned_table p ON p.partrelid = i.inhparent
          JOIN pg_class c ON c.oid = i.inhrelid
          JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'c' AND k.conname = c.relname || '_range'
         WHERE NOT i.inhdetachpending
         ORDER BY c.oid
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.part, r.conname);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- The previous versions, as migrations/00013 (claim), 00008
-- (ensure_partitions, ensure_month) and 00011 (ensure_day_partitions) left
-- them. The CHECKs dropped do not come back: nothing needs them once the
-- partition is attached, and the restored functions add one to every
-- partition they create.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION idempotency_keys_claim(p_tenant_id bigint, p_key text, p_fingerprint bytea, p_method text,
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION idempotency_key_heads_ensure_month(day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    month date := date_trunc('month', day)::date;
    part  text := 'idempotency_key_heads_p' || to_char(month, 'YYYYMM');
    lo    timestamptz := month::timestamp AT TIME ZONE 'UTC';
    hi    timestamptz := (month + interval '1 month')::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass(part) IS NOT NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE idempotency_key_heads INCLUDING ALL, '
                   'CONSTRAINT %I CHECK (created_at >= %L AND created_at < %L))',
                   part, part || '_range', lo, hi);
    EXECUTE format('ALTER TABLE idempotency_key_heads ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   part, lo, hi);
    RETURN 1;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION idempotency_keys_ensure_partitions(from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day     date;
    part    text;
    lo      timestamptz;
    hi      timestamptz;
    def     regclass;
    held    boolean;
    created integer := 0;
BEGIN
    -- Two callers checking to_regclass at once would both try to create the
    -- same day and one would fail; serialise them (advisory namespace 0x70700002).
    PERFORM pg_advisory_xact_lock(1886388226, 0);
    SELECT nullif(partdefid, 0)::regclass INTO def
      FROM pg_partitioned_table WHERE partrelid = 'idempotency_keys'::regclass;
    FOR i IN 0 .. days - 1 LOOP
        day  := from_day + i;
        part := 'idempotency_keys_p' || to_char(day, 'YYYYMMDD');
        lo   := day::timestamp AT TIME ZONE 'UTC';
        hi   := (day + 1)::timestamp AT TIME ZONE 'UTC';
        PERFORM idempotency_key_heads_ensure_month(day);
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        IF def IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE created_at >= $1 AND created_at < $2)', def)
               INTO held USING lo, hi;
            IF held THEN
                RAISE WARNING 'idempotency_keys: day % not partitioned: the DEFAULT partition % holds its rows', day, def;
                CONTINUE;
            END IF;
        END IF;
        EXECUTE format('CREATE TABLE %I (LIKE idempotency_keys INCLUDING ALL, '
                       'CONSTRAINT %I CHECK (created_at >= %L AND created_at < %L))',
                       part, part || '_range', lo, hi);
        EXECUTE format('ALTER TABLE idempotency_keys ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       part, lo, hi);
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION phasepay_ensure_day_partitions(parent text, col text, from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day     date;
    part    text;
    lo      timestamptz;
    hi      timestamptz;
    created integer := 0;
BEGIN
    -- Serialise callers per parent (advisory namespace 0x70700011), so two
    -- never both try to create the same day.
    PERFORM pg_advisory_xact_lock(1886388241, hashtext(parent));
    FOR i IN 0 .. days - 1 LOOP
        day  := from_day + i;
        part := parent || '_p' || to_char(day, 'YYYYMMDD');
        lo   := day::timestamp AT TIME ZONE 'UTC';
        hi   := (day + 1)::timestamp AT TIME ZONE 'UTC';
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL, '
                       'CONSTRAINT %I CHECK (%I >= %L AND %I < %L))',
                       part, parent, part || '_range', col, lo, col, hi);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       parent, part, lo, hi);
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd
