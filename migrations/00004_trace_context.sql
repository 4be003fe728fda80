-- +goose Up
-- The W3C traceparent of the request that claimed the key, so that a worker
-- or reaper that takes it over can link its trace to the original one.
ALTER TABLE idempotency_keys ADD COLUMN trace_context text;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN trace_context;
