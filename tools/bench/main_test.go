package bench

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestMain lets the test binary stand in for tools/cmd/bench: run as
// "<test binary> bare", it is `bench bare`, so the tests start the bare
// baselines as a process of their own, as the benchmark does
// (testBareCmd).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "bare" {
		os.Exit(serveBareForTest())
	}
	os.Exit(m.Run())
}

func serveBareForTest() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := BareConfigFromEnv(os.Getenv)
	if err == nil {
		err = ServeBare(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		return 1
	}
	return 0
}

// testBareCmd is Config.BareCmd for tests: this test binary, as TestMain
// serves it.
func testBareCmd(t *testing.T) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("test executable: %v", err)
	}
	return []string{exe, "bare"}
}
