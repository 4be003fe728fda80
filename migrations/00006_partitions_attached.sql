-- +goose Up

-- idempotency_keys_ensure_partitions, second version. The first created each
-- day with CREATE TABLE … PARTITION OF, which takes ACCESS EXCLUSIVE on the
-- parent: queued behind any long reader of idempotency_keys (a report, a
-- pg_dump), it made every claim and replay queue behind itself in turn, for
-- as long as the reader ran. A standalone table attached with ATTACH
-- PARTITION needs only SHARE UPDATE EXCLUSIVE on the parent, which conflicts
-- with neither readers (ACCESS SHARE) nor writers (ROW EXCLUSIVE): claims go
-- on while it waits and while it runs.
--
-- Each day is built as a table of its own, LIKE the parent (columns,
-- defaults, CHECK constraints, indexes; ATTACH adopts the matching indexes
-- instead of building new ones and clones the foreign key, which has
-- nothing to check in an empty table), plus a CHECK constraint that is
-- exactly the partition's range, so that ATTACH knows from the catalog that
-- no row is out of range and skips its validation scan. CREATE and ATTACH
-- commit together (one transaction: the function's), so no unattached table
-- is ever left behind.
--
-- A DEFAULT partition (phasepay creates none; an operator might) changes two
-- things. ATTACH must also prove that the DEFAULT partition holds no row of
-- the new day: it scans it, under ACCESS EXCLUSIVE on the DEFAULT partition
-- (the caller's lock_timeout bounds that wait; see
-- idempotency.MaintenanceSettings). And if the DEFAULT partition already
-- holds rows of that day (a day whose partition was missed), the ATTACH can
-- never succeed: this day is skipped, not failed, so that the days after it,
-- retention and the api's start still go on; the day's keys stay where they
-- are, in the DEFAULT partition, where claims and lookups find them. The
-- skip is raised as a WARNING and shows in idempotency.MissingDays, which
-- the reaper and the api log. Moving the rows out instead would rewrite
-- live keys under the feet of the workers that hold them, and would take the
-- DEFAULT partition's ACCESS EXCLUSIVE lock for as long as the copy runs:
-- that repair is the operator's, documented in docs/operations.md.
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION idempotency_keys_ensure_partitions(from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day     date;
    part    text;
    created integer := 0;
BEGIN
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
