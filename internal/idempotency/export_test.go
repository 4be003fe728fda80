package idempotency

import "strings"

// DueKeysSQLForTest is the reaper's pick of due keys (a batch of 20), for
// the plan test, as sent.
var DueKeysSQLForTest = strings.Replace(dueKeysSQL, "{{limit}}", "20", 1)

// TakeOverExpiredForTest is the reaper's takeover of limit keys, as sent.
var TakeOverExpiredForTest = takeOverExpiredFor

// FinalizeDetachForTest is finalizeDetach, for its test.
var FinalizeDetachForTest = finalizeDetach

// ClaimFuncSQLForTest is QueueClaim's claim (idempotency_keys_claim), for
// the tests of what it finds.
var ClaimFuncSQLForTest = claimFuncSQL
