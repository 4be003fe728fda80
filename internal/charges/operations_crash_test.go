package charges_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
)

// A capture, a void and a refund each die at every crash point their runs
// pass, in both commit modes; the retry after the lease ran out finishes
// with one operation at the PSP.
func TestOperationsResumeAfterCrashAtEveryPoint(t *testing.T) {
	t.Parallel()
	type op struct {
		name   string
		points []phases.CrashPoint
	}
	ops := []op{
		{"capture", []phases.CrashPoint{phases.CrashAfterClaim, phases.CrashAfter(charges.PointCaptureStarted), phases.CrashAfterCall, phases.CrashAfter(charges.PointPSPCaptured)}},
		{"void", []phases.CrashPoint{phases.CrashAfterClaim, phases.CrashAfter(charges.PointVoidStarted), phases.CrashAfterCall, phases.CrashAfter(charges.PointPSPVoided)}},
		{"refund", []phases.CrashPoint{phases.CrashAfterClaim, phases.CrashAfter(charges.PointRefundCreated), phases.CrashAfterCall, phases.CrashAfter(charges.PointPSPRefunded)}},
	}
	for _, o := range ops {
		for _, oneCommit := range []bool{false, true} {
			for _, at := range o.points {
				t.Run(fmt.Sprintf("%s/one_commit=%v/%s", o.name, oneCommit, at), func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					b := setup(t)
					svc := b.Service(t, 0, phases.Config{})
					id := authorized(t, b, svc)
					if o.name == "refund" {
						req, err := charges.ParseCaptureRequest(id, []byte(`{}`))
						require.NoError(t, err)
						_, err = svc.Capture(ctx, b.Tenant, "cap", id, phases.Parsed(req))
						require.NoError(t, err)
					}
					run := func(s *charges.Service) (phases.Result, error) {
						switch o.name {
						case "capture":
							req, err := charges.ParseCaptureRequest(id, []byte(`{"amount":600}`))
							require.NoError(t, err)
							return s.Capture(ctx, b.Tenant, "op", id, phases.Parsed(req))
						case "void":
							req, err := charges.ParseVoidRequest(id, []byte(`{}`))
							require.NoError(t, err)
							return s.Void(ctx, b.Tenant, "op", id, phases.Parsed(req))
						}
						req, _, err := charges.ParseRefundRequest(fmt.Appendf(nil, `{"charge":%q,"amount":400}`, id))
						require.NoError(t, err)
						return s.Refund(ctx, b.Tenant, "op", phases.Parsed(req))
					}
					_, err := run(b.Service(t, 0, phases.Config{OneCommitPerPhase: oneCommit, CrashHook: phasestest.CrashAt(at)}))
					if err == nil {
						return // this mode does not pass this point
					}
					require.ErrorIs(t, err, phasestest.ErrCrash)
					res, err := run(b.Service(t, b.Keys.Lease()+time.Second, phases.Config{OneCommitPerPhase: oneCommit}))
					require.NoError(t, err)
					require.Contains(t, []int{200, 201}, res.Response.Status, string(res.Response.Body))
					state, _, _ := b.KeyState(t, "op")
					require.Equal(t, "done", state)
					switch o.name {
					case "capture":
						require.Len(t, b.Mock.Captures(), 1)
					case "void":
						require.Len(t, b.Mock.Voids(), 1)
					default:
						require.Len(t, b.Mock.Refunds(), 1)
						c, err := svc.Get(ctx, b.Tenant, id)
						require.NoError(t, err)
						require.EqualValues(t, 400, c.AmountRefunded)
					}
				})
			}
		}
	}
}
