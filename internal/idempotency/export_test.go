package idempotency

import (
	"errors"
	"strings"
	"time"
)

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

// LostTakeoverForTest is the error of a takeover of rec by s whose
// statement was sent and whose answer was lost, whether or not it
// committed: a fresh token, as a takeover that did not commit wrote none.
func LostTakeoverForTest(s *Store, rec Record) *LostTakeoverError {
	return s.lostTakeover(errors.New("answer lost"), newLeaseToken(), time.Now(), &rec).(*LostTakeoverError)
}

// UnlockBatchSQLForTest is the release of a lost batch takeover, for the
// plan test.
var UnlockBatchSQLForTest = unlockBatchSQL

// PeekDayStatementForTest is the day read PeekDay sends for day, for the
// plan tests.
var PeekDayStatementForTest = peekDayStatement
