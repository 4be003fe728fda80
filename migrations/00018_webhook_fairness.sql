-- +goose Up

-- Webhook delivery shared fairly between tenants and hosts, and at most 16
-- live endpoints per tenant (internal/webhooks).
--
-- webhook_endpoints.host: the URL's host name in lower case, without the
-- port (several ports of one machine are one machine to protect), or the
-- address between the brackets of an IPv6 literal. A deliverer counts its
-- attempts in flight by it (the per-host cap) and leaves the hosts it
-- saturates out of its claims. Generated, so that every endpoint has it
-- however it was inserted, and the deliverers agree on it. (No user
-- information, refused at creation, can precede the host.)
ALTER TABLE webhook_endpoints ADD COLUMN host text NOT NULL GENERATED ALWAYS AS (
    lower(coalesce(substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://\[([^]/]*)\]'),
                   substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#:]*)'),
                   ''))
) STORED;

-- webhook_endpoints.slot: which of its 16 places a live endpoint holds. The
-- limit is a constraint, not a count a creation makes before inserting
-- (two concurrent creations would both count 15): no two live endpoints of
-- a tenant share a slot, and there are 16 slots. A deleted endpoint keeps
-- its number but leaves the index, freeing the slot. Live endpoints made
-- before this migration are numbered in creation order; a tenant that
-- already had more than 16 keeps the others, unnumbered (NULLs never
-- conflict), and can create no more until fewer than 16 slots are held.
-- Every endpoint made from now on is numbered (the CHECK is NOT VALID: it
-- holds for every row written after it, and is not checked against those
-- older ones).
ALTER TABLE webhook_endpoints ADD COLUMN slot smallint CHECK (slot BETWEEN 1 AND 16);
UPDATE webhook_endpoints w
   SET slot = n.slot
  FROM (SELECT tenant_id, id, row_number() OVER (PARTITION BY tenant_id ORDER BY created_at, id) AS slot
          FROM webhook_endpoints
         WHERE deleted_at IS NULL) n
 WHERE w.tenant_id = n.tenant_id AND w.id = n.id AND n.slot <= 16;
CREATE UNIQUE INDEX webhook_endpoints_slot ON webhook_endpoints (tenant_id, slot) WHERE deleted_at IS NULL;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_live_has_slot
    CHECK (deleted_at IS NOT NULL OR slot IS NOT NULL) NOT VALID;

-- The deliverers' claim goes tenant by tenant (webhooks.candidatesSQL): it
-- skips from one tenant with pending deliveries to the next along this
-- index, and reads each tenant's due deliveries in due order from it, so a
-- tenant whose endpoints all hang, with thousands of deliveries due, costs
-- a claim one probe, not a scan of its backlog. It replaces
-- webhook_deliveries_due (migrations/00011), whose global due order let
-- such a tenant's backlog go first. The expression is spelled exactly as
-- webhooks.dueAtExpr.
CREATE INDEX webhook_deliveries_tenant_due ON webhook_deliveries
    (tenant_id, (greatest(next_attempt_at, coalesce(locked_until, '-infinity'::timestamptz))))
    WHERE state = 'pending';
DROP INDEX webhook_deliveries_due;

-- +goose Down
CREATE INDEX webhook_deliveries_due ON webhook_deliveries
    ((greatest(next_attempt_at, coalesce(locked_until, '-infinity'::timestamptz))))
    WHERE state = 'pending';
DROP INDEX webhook_deliveries_tenant_due;
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_live_has_slot;
DROP INDEX webhook_endpoints_slot;
ALTER TABLE webhook_endpoints DROP COLUMN slot;
ALTER TABLE webhook_endpoints DROP COLUMN host;
