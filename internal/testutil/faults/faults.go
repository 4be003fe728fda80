//go:build chaos

package faults

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
)

// CrashHook kills this process (SIGKILL: no deferred call, no lease
// release, exactly like a crash) at the crash points named in
// PHASEPAY_CHAOS_CRASH, each with its probability, drawn from
// PHASEPAY_CHAOS_SEED. It logs the point first, so the chaos harness can
// count which boundaries were hit. Nil when PHASEPAY_CHAOS_CRASH is unset.
func CrashHook(getenv func(string) string, logger *slog.Logger) (func(context.Context, phases.CrashPoint) error, error) {
	spec := getenv("PHASEPAY_CHAOS_CRASH")
	if spec == "" {
		return nil, nil
	}
	probs := map[string]float64{} // by crash point name
	for _, part := range strings.Split(spec, ",") {
		name, p, ok := strings.Cut(strings.TrimSpace(part), "=")
		f, err := strconv.ParseFloat(p, 64)
		if !ok || err != nil || f < 0 || f > 1 {
			return nil, fmt.Errorf("PHASEPAY_CHAOS_CRASH: %q is not point=probability", part)
		}
		probs[name] = f
	}
	seed, _ := strconv.ParseUint(getenv("PHASEPAY_CHAOS_SEED"), 10, 64)
	var (
		mu  sync.Mutex
		rnd = rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	)
	return func(ctx context.Context, at phases.CrashPoint) error {
		mu.Lock()
		hit := rnd.Float64() < probs[at.String()]
		mu.Unlock()
		if hit {
			logger.WarnContext(ctx, "chaos crash", "point", at.String())
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns: the process is gone
		}
		return nil
	}, nil
}

// Wrap returns a, or a wrapped in the defect PHASEPAY_CHAOS_DEFECT names.
// The wrapper keeps whatever else a offers (routing between PSPs, capture,
// void and refund), so that the service sees the same PSP but for the
// defect.
func Wrap(getenv func(string) string, a charges.Authorizer) (charges.Authorizer, error) {
	var d defect
	switch name := getenv("PHASEPAY_CHAOS_DEFECT"); name {
	case "":
		return a, nil
	case DefectFreshPSPKey:
		d = freshKey
	case DefectFailoverOnUnknown:
		d = unknownAsRefusal
	default:
		return nil, fmt.Errorf("PHASEPAY_CHAOS_DEFECT: %q is none of %s, %s", name, DefectFreshPSPKey, DefectFailoverOnUnknown)
	}
	if full, ok := a.(fullPSP); ok {
		return &defectiveRouter{fullPSP: full, defect: d}, nil
	}
	return &defectiveAuthorizer{Authorizer: a, defect: d}, nil
}

// defect changes one authorization attempt.
type defect func(ctx context.Context, a charges.Authorizer, req psp.AuthorizeRequest) (psp.Outcome, error)

func freshKey(ctx context.Context, a charges.Authorizer, req psp.AuthorizeRequest) (psp.Outcome, error) {
	b := make([]byte, 8)
	_, _ = crand.Read(b)
	req.IdempotencyKey += ":" + hex.EncodeToString(b)
	req.FirstSend = true
	return a.AuthorizeOutcome(ctx, req)
}

func unknownAsRefusal(ctx context.Context, a charges.Authorizer, req psp.AuthorizeRequest) (psp.Outcome, error) {
	out, err := a.AuthorizeOutcome(ctx, req)
	if out.Class == psp.ClassUnknown {
		return psp.Outcome{Class: psp.ClassFinalFailure, Reason: "defect: unknown taken for a refusal", PSP: req.PSP}, nil
	}
	return out, err
}

// fullPSP is what a router between PSPs offers (*routing.Router).
type fullPSP interface {
	charges.Authorizer
	charges.Routes
	charges.Operator
}

type defectiveRouter struct {
	fullPSP
	defect defect
}

func (d *defectiveRouter) AuthorizeOutcome(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error) {
	return d.defect(ctx, d.fullPSP, req)
}

type defectiveAuthorizer struct {
	charges.Authorizer
	defect defect
}

func (d *defectiveAuthorizer) AuthorizeOutcome(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error) {
	return d.defect(ctx, d.Authorizer, req)
}
