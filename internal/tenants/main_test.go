package tenants_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every listener, pool and pooler a test starts is stopped by its
// cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
