package pgcluster_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every server, pool and goroutine a test starts is stopped by its
// cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
