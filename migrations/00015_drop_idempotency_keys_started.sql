-- +goose Up

-- idempotency_keys_started (migrations/00002), on (locked_until) of the
-- started keys, was the reaper's index until idempotency_keys_due
-- (migrations/00007) replaced it: the reaper's pick orders by the moment a
-- key becomes due, which only the new index holds. No statement reads it
-- since: the count of stuck keys and the census read
-- idempotency_keys_unfinished, the reaper idempotency_keys_due, every
-- other statement a key by its primary key (checked with EXPLAIN, and
-- pg_stat_user_indexes showed no scan of it on a database that had served
-- hours of load). But every write that sets locked_until of a started key
-- kept it up to date: a claim's insert, and each advance, heartbeat and
-- takeover (locked_until is indexed, so none of those updates is HOT, and
-- each adds an entry to every index whose predicate the row matches).
--
-- DROP INDEX on a partitioned table takes ACCESS EXCLUSIVE on it for the
-- few milliseconds the drop takes (there is no CONCURRENTLY for it).
DROP INDEX idempotency_keys_started;

-- +goose Down
CREATE INDEX idempotency_keys_started ON idempotency_keys (locked_until) WHERE state = 'started';
