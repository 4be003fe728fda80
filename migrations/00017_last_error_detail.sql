-- +goose Up

-- last_error is read by tenants (GET /v1/idempotency_keys/{key}, the
-- request.needs_attention event): since this migration it holds stable
-- words only ("PSP unreachable", "PSP answered 503"), which name no
-- internal host, address or URL and quote no PSP answer. The raw cause
-- they summarise (the address dialled, the PSP's answer body) is kept for
-- operators here, written by the same statement as last_error
-- (internal/idempotency, releaseSQL), so the two always describe the same
-- attempt. Only `bin/api requests show` and `requests list --json` read it.
--
-- A nullable column without a default: a change of the catalog only, no
-- rewrite of any partition; partitions made later copy it (LIKE
-- idempotency_keys INCLUDING ALL, migrations/00016).
ALTER TABLE idempotency_keys ADD COLUMN last_error_detail text;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN last_error_detail;
