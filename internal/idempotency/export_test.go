package idempotency

import "strings"

// DueKeysSQLForTest is the reaper's pick of due keys (a batch of 20), for
// the plan test.
var DueKeysSQLForTest = strings.Replace(dueKeysSQL, "$1", "20", 1)

// DueKeysSQLGenericForTest is the pick as sent, its batch size a
// parameter, for the plan test's generic plan.
var DueKeysSQLGenericForTest = dueKeysSQL

// FinalizeDetachForTest is finalizeDetach, for its test.
var FinalizeDetachForTest = finalizeDetach

// ClaimFuncSQLForTest is QueueClaim's claim (idempotency_keys_claim), for
// the tests of what it finds.
var ClaimFuncSQLForTest = claimFuncSQL

// PeekDayStatementForTest is the day read PeekDay sends for day, for the
// plan tests.
var PeekDayStatementForTest = peekDayStatement
