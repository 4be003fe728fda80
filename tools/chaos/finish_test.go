package chaos

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecoveredPanicIsAViolation: a panic the api recovered (and answered
// 500) is reported with where it happened; other log lines are not.
func TestRecoveredPanicIsAViolation(t *testing.T) {
	logs := `{"level":"WARN","msg":"chaos crash","point":"after_claim"}
{"level":"ERROR","msg":"panic","panic":"runtime error: invalid memory address or nil pointer dereference","stack":"goroutine 1 [running]:\nruntime/debug.Stack()\ngithub.com/phasepay/phasepay/internal/httpapi.(*server).recoverPanics.func1.1()\ngithub.com/phasepay/phasepay/internal/phases.Do[...](0x1)\n\t/src/internal/phases/engine.go:212 +0xfc8\n"}
{"level":"ERROR","msg":"request failed","error":"panic: runtime error"}
`
	got := recoveredPanics(logs)
	require.Len(t, got, 1)
	require.Equal(t, "runtime error: invalid memory address or nil pointer dereference at github.com/phasepay/phasepay/internal/phases.Do[...](0x1)", got[0])
	require.Empty(t, recoveredPanics(`{"level":"INFO","msg":"request","status":500}`))
}

// TestInternalErrorIsNamed: a request answered 500 is reported with the
// error the api logged for it; a 503's WARN is not.
func TestInternalErrorIsNamed(t *testing.T) {
	logs := `{"level":"WARN","msg":"request failed","request_id":"a","status":503,"error":"database unavailable"}
{"level":"ERROR","msg":"request failed","request_id":"b","status":500,"error":"charges.create: boom"}
`
	require.Equal(t, []string{"charges.create: boom (request b)"}, internalErrors(logs))
}
