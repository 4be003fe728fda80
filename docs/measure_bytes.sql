-- Bytes per key and per charge, measured on a throwaway database:
--
--   psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE docs_measure'
--   DATABASE_URL=postgres://postgres@127.0.0.1:5432/docs_measure?sslmode=disable go run ./cmd/api migrate
--   psql -h 127.0.0.1 -U postgres -d docs_measure -v n=100000 -f docs/measure_bytes.sql
--   psql -h 127.0.0.1 -U postgres -c 'DROP DATABASE docs_measure'
--
-- Every key goes through the life the service gives it by default (two
-- commits, internal/charges/machine.go), one row at a time: tx 1 inserts the
-- key already at charge_created with a pending charge; tx 2 records the
-- authorization on the charge and stores the ~267-byte charge object as the
-- key's response (done). Keys are UUIDs (as client/ makes them), spread over
-- 10 tenants, all in today's partition.
\set ON_ERROR_STOP on
SET synchronous_commit = off;  -- speed only: durability does not change sizes

INSERT INTO tenants (name) SELECT 'measure-' || i FROM generate_series(1, 10) i ON CONFLICT DO NOTHING;

CREATE OR REPLACE PROCEDURE measure_lifecycle(n integer) LANGUAGE plpgsql AS $$
DECLARE
    t    bigint;
    k    text;
    ca   timestamptz;
    ch   text;
    body bytea := convert_to('{"amount":1000,"currency":"usd","description":"order 42","metadata":{"order":"42"},"payment_method":"pm_card_visa"}', 'UTF8');
    tmin bigint;
BEGIN
    SELECT min(id) INTO tmin FROM tenants WHERE name LIKE 'measure-%';
    FOR i IN 1 .. n LOOP
        t  := tmin + i % 10;
        k  := gen_random_uuid()::text;
        ch := 'ch_' || substr(md5(random()::text), 1, 24);
        -- tx 1: the claim, inserting the key at charge_created, and the pending charge.
        INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body, locked_until,
                                      trace_context, recovery_point)
        VALUES (t, k, sha256(convert_to(k, 'UTF8')), 'POST', '/v1/charges', body, phasepay_now() + interval '60 s',
                '00-' || md5(k) || '-' || substr(md5(ch), 1, 16) || '-01', 'charge_created')
        RETURNING created_at INTO ca;
        INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at, amount, currency, payment_method, description, metadata, status)
        VALUES (t, ch, k, ca, 1000, 'usd', 'pm_card_visa', 'order 42', '{"order":"42"}', 'pending');
        COMMIT;
        -- tx 2: the authorization on the charge, then the key done (finishSQL).
        UPDATE charges SET status = 'authorized', psp_reference = 'auth_' || substr(md5(k), 1, 16), updated_at = phasepay_now()
         WHERE tenant_id = t AND id = ch;
        UPDATE idempotency_keys
           SET state = 'done', recovery_point = 'done', locked_until = NULL, response_status = 201,
               response_content_type = 'application/json', finished_at = phasepay_now(),
               response_body = convert_to(format(
                 '{"id":"%s","object":"charge","amount":1000,"currency":"usd","payment_method":"pm_card_visa","status":"authorized","psp_reference":"auth_%s","description":"order 42","metadata":{"order":"42"},"created_at":"%s"}' || chr(10),
                 ch, substr(md5(k), 1, 16), to_char(ca AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')), 'UTF8')
         WHERE tenant_id = t AND key = k AND created_at = ca AND lock_version = 1 AND state = 'started';
        COMMIT;
    END LOOP;
END
$$;

SELECT pg_current_wal_lsn() AS wal_start \gset
CALL measure_lifecycle(:n);
SELECT round(pg_wal_lsn_diff(pg_current_wal_lsn(), :'wal_start') / :n) AS wal_bytes_per_charge;
VACUUM ANALYZE idempotency_keys, charges;

-- Table + indexes (+ TOAST) of the key partitions and of charges, per row.
CREATE OR REPLACE VIEW measure_sizes AS
WITH parts AS (
    SELECT sum(pg_total_relation_size(i.inhrelid)) AS total,
           sum(pg_relation_size(i.inhrelid))       AS heap,
           sum(pg_indexes_size(i.inhrelid))        AS idx
      FROM pg_inherits i WHERE i.inhparent = 'idempotency_keys'::regclass
)
SELECT 'idempotency_keys' AS relation, (SELECT count(*) FROM idempotency_keys) AS row_count,
       total AS total_bytes, heap AS heap_bytes, idx AS index_bytes,
       round(total / (SELECT count(*) FROM idempotency_keys)) AS bytes_per_row
  FROM parts
UNION ALL
SELECT 'charges', (SELECT count(*) FROM charges),
       pg_total_relation_size('charges'), pg_relation_size('charges'), pg_indexes_size('charges'),
       round(pg_total_relation_size('charges')::numeric / (SELECT count(*) FROM charges));

-- As the lifecycle left them: the dead versions of each row's updates
-- vacuumed, their space free for the next inserts (the steady state).
SELECT * FROM measure_sizes;

-- Compacted (VACUUM FULL): the floor, what bulk-loaded rows would take.
VACUUM FULL idempotency_keys, charges;
SELECT * FROM measure_sizes;

SELECT avg(length(response_body))::int AS avg_response_bytes, avg(length(request_body))::int AS avg_request_bytes
  FROM idempotency_keys;
