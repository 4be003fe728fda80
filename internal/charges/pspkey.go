package charges

// PSPKey is the PSP idempotency key of a charge's authorization: derived
// from the charge id, so it is unique across tenants and the same on every
// attempt, takeover and reaper pass. A repeat after a crash therefore gets
// the PSP's first answer instead of a second authorization.
func PSPKey(chargeID string) string { return chargeID + ":authorize" }
