// Package webhooks owns a tenant's webhook endpoints and sends them the
// events internal/events queued for them: at least once, signed, on the
// retry schedule, several deliverers at once (Deliverer, run by bin/reaper).
//
// A log line names a tenant by its name, as every other line and command
// does, read once per tenant (tenants.NameCache). An id is logged as
// tenant_id, never under tenant: an operator searching the logs for
// "tenant":"acme" must find every line about acme.
//
//	go test ./internal/webhooks/ -run '^TestDeliveryLogNamesTheTenant$'
package webhooks
