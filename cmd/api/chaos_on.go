//go:build chaos

package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/phasepay/phasepay/internal/charges"
)

// chaosCrashHook, in binaries built with the chaos tag, kills this process
// (SIGKILL: no deferred call, no lease release, exactly like a crash) at the
// state machine's crash points with the probabilities in
// PHASEPAY_CHAOS_CRASH, e.g. "after_claim=0.02,after_psp_call=0.05", drawn
// from PHASEPAY_CHAOS_SEED. It logs the point first, so the chaos harness
// can count which boundaries were hit.
func chaosCrashHook(getenv func(string) string, logger *slog.Logger) (func(context.Context, charges.CrashPoint) error, error) {
	spec := getenv("PHASEPAY_CHAOS_CRASH")
	if spec == "" {
		return nil, nil
	}
	probs := map[charges.CrashPoint]float64{}
	for _, part := range strings.Split(spec, ",") {
		name, p, ok := strings.Cut(strings.TrimSpace(part), "=")
		f, err := strconv.ParseFloat(p, 64)
		if !ok || err != nil || f < 0 || f > 1 {
			return nil, fmt.Errorf("PHASEPAY_CHAOS_CRASH: %q is not point=probability", part)
		}
		probs[charges.CrashPoint(name)] = f
	}
	seed, _ := strconv.ParseUint(getenv("PHASEPAY_CHAOS_SEED"), 10, 64)
	var (
		mu  sync.Mutex
		rnd = rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	)
	return func(ctx context.Context, at charges.CrashPoint) error {
		mu.Lock()
		hit := rnd.Float64() < probs[at]
		mu.Unlock()
		if hit {
			logger.WarnContext(ctx, "chaos crash", "point", string(at))
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns: the process is gone
		}
		return nil
	}, nil
}
