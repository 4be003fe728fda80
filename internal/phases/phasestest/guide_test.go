package phasestest_test

// A fifth operation, vouchers.issue, written by following
// docs/adding-an-operation.md step by step, and crashed at every point.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
)

// Step 1, the phases:
//
//	          claim (tx 1)
//	             │
//	  ┌────── start ───────┐   tx 1 too: no foreign call before it
//	  │ create the voucher │
//	  ▼                    │
//	voucher_created        │
//	  │ issuer: issue      │   the foreign call, key <voucher>:issue,
//	  ▼                    │   outside any transaction
//	voucher_issued ────────┐   tx 2: the issuer's code on the voucher,
//	  │ answer             │   and the response stored
//	  ▼                    │
//	done ◀─────────────────┘

// Step 2, the request's names.
const voucherPath = "/v1/vouchers"

const (
	pointVoucherCreated phases.Point = "voucher_created"
	pointVoucherIssued  phases.Point = "voucher_issued"
)

// voucher is the operation's object, and the issuer's answer to this run's
// call (step 6: kept on the object, not in the engine).
type voucher struct {
	ID     string
	Amount int64
	Code   string

	answer issued
}

// issuer is the foreign service: it issues a code once per key and answers
// a key it has seen with its first answer, as a PSP does. busy makes its
// next answers Busy.
type issuer struct {
	mu     sync.Mutex
	codes  map[string]string
	issues int
	busy   int
}

// issued is the issuer's answer to one call.
type issued struct {
	code string
	busy bool
}

func (s *issuer) issue(key string, amount int64) issued {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy > 0 {
		s.busy--
		return issued{busy: true}
	}
	if _, ok := s.codes[key]; !ok {
		s.issues++
		s.codes[key] = fmt.Sprintf("GIFT-%d-%d", amount, s.issues)
	}
	return issued{code: s.codes[key]}
}

// issueVoucher is the operation.
func issueVoucher(s *issuer) *phases.Operation[*voucher] {
	return &phases.Operation[*voucher]{
		Name: "vouchers.issue", Method: http.MethodPost, Path: voucherPath,
		// Step 3: parse strictly, and fingerprint what was parsed.
		Parse: func(path string, body []byte) (phases.Request, error) {
			var p struct {
				Amount int64 `json:"amount"`
			}
			if err := json.Unmarshal(body, &p); err != nil || p.Amount <= 0 {
				return phases.Request{}, errors.New("amount must be a positive integer")
			}
			return phases.NewRequest(http.MethodPost, path, p)
		},
		// Step 4: an id derived from what a retry carries.
		ObjectID: func(tenantID int64, key string, req phases.Request, inc phases.Incarnation) string {
			n, ok := inc.Derived()
			if !ok {
				return "vo_random"
			}
			return fmt.Sprintf("vo_%d_%s_%x_%d", tenantID, key, req.Fingerprint[:4], n)
		},
		// Step 7: read the object as the last committed phase left it.
		Load: func(ctx context.Context, tx *phases.Tx, run *phases.Run[*voucher]) (*voucher, error) {
			v := &voucher{ID: run.ObjectID}
			var code *string
			err := tx.QueryRow(ctx, `SELECT amount, code FROM vouchers WHERE id = $1`, v.ID).Scan(&v.Amount, &code)
			if code != nil {
				v.Code = *code
			}
			return v, err
		},
		// Step 6: the phases.
		Phases: []phases.Phase[*voucher]{
			// tx 1, with the claim: the voucher, before anything is sent.
			{To: pointVoucherCreated, Commit: createVoucher},
			// tx 2, after the issuer's answer: the code, and the answer.
			{To: pointVoucherIssued, Call: issueCall(s), Commit: recordCode},
			{To: phases.Done, Commit: func(_ context.Context, _ *phases.Tx, run *phases.Run[*voucher]) (phases.Next, error) {
				body := fmt.Sprintf(`{"id":%q,"code":%q}`, run.Object.ID, run.Object.Code)
				return phases.Respond(phases.Response{Status: http.StatusCreated, ContentType: "application/json", Body: []byte(body)}), nil
			}},
		},
	}
}

// createVoucher is start → voucher_created: the row, and run.Object set.
func createVoucher(_ context.Context, tx *phases.Tx, run *phases.Run[*voucher]) (phases.Next, error) {
	var p struct{ Amount int64 }
	if err := json.Unmarshal(run.Request().Body, &p); err != nil {
		return phases.Next{}, err
	}
	run.Object = &voucher{ID: run.ObjectID, Amount: p.Amount}
	tx.Queue(`INSERT INTO vouchers (id, amount) VALUES ($1, $2)`, run.ObjectID, p.Amount)
	return phases.Proceed(), nil
}

// issueCall is the foreign call, under a key derived from the voucher. The
// issuer answers a repeated key with its first answer, so a run that is not
// Fresh needs no lookup of its own here.
func issueCall(s *issuer) func(context.Context, *phases.Run[*voucher]) (phases.CallOutcome, error) {
	return func(_ context.Context, run *phases.Run[*voucher]) (phases.CallOutcome, error) {
		v := run.Object
		key := v.ID + ":issue"
		v.answer = s.issue(key, v.Amount)
		out := phases.CallOutcome{Class: phases.Success, Service: "issuer", Call: "issue", Key: key}
		if v.answer.busy {
			out.Class = phases.Busy
			return out, phases.Unavailable(errors.New("issuer busy"))
		}
		return out, nil
	}
}

// recordCode is voucher_created → voucher_issued: the issuer's code.
func recordCode(_ context.Context, tx *phases.Tx, run *phases.Run[*voucher]) (phases.Next, error) {
	v := run.Object
	v.Code = v.answer.code
	tx.Queue(`UPDATE vouchers SET code = $2 WHERE id = $1`, v.ID, v.Code)
	return phases.Proceed(), nil
}

// vouchers is a world with the vouchers table, an issuer, and the
// operation registered on the world's engine.
func vouchers(t *testing.T, cfg phases.Config) (*phasestest.World, *issuer, *phases.Operation[*voucher]) {
	t.Helper()
	w := phasestest.New(t, cfg)
	_, err := w.Pool.Exec(context.Background(), `CREATE TABLE vouchers (id text PRIMARY KEY, amount bigint NOT NULL, code text)`)
	require.NoError(t, err)
	s := &issuer{codes: map[string]string{}}
	op := issueVoucher(s)
	phases.Register(w.Engine, op)
	return w, s, op
}

// Step 9: a crash at every point, in both commit modes, is finished by a
// later process with one voucher and one code issued, and replayed.
func TestGuideOperationSurvivesACrashAtEveryPoint(t *testing.T) {
	t.Parallel()
	points := phases.CrashPoints(issueVoucher(nil))
	require.Equal(t, []phases.CrashPoint{phases.CrashAfterClaim, phases.CrashAfter(pointVoucherCreated),
		phases.CrashAfterCall, phases.CrashAfter(pointVoucherIssued)}, points)
	for _, oneCommit := range []bool{false, true} {
		for _, at := range points {
			t.Run(fmt.Sprintf("one_commit=%v/%s", oneCommit, at), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				w, s, op := vouchers(t, phases.Config{OneCommitPerPhase: oneCommit, CrashHook: phasestest.CrashAt(at)})
				body := phases.AsSent([]byte(`{"amount":500}`))
				first, err := phases.Do(ctx, w.Engine, op, w.Tenant, "k", voucherPath, body)
				if err == nil {
					// This mode never passes at (after_voucher_created is a
					// commit of its own only with one commit per phase).
					require.Equal(t, phases.OutcomeNew, first.Outcome)
				} else {
					require.ErrorIs(t, err, phasestest.ErrCrash)
				}

				later, err := w.Later(ctx, 2*phasestest.Lease, phases.Config{OneCommitPerPhase: oneCommit})
				require.NoError(t, err)
				phases.Register(later, op)
				res, err := phases.Do(ctx, later, op, w.Tenant, "k", voucherPath, body)
				require.NoError(t, err)
				require.Equal(t, http.StatusCreated, res.Response.Status)
				again, err := phases.Do(ctx, later, op, w.Tenant, "k", voucherPath, body)
				require.NoError(t, err)
				require.Equal(t, phases.OutcomeReplay, again.Outcome)
				require.Equal(t, res.Response.Body, again.Response.Body)

				require.Equal(t, 1, s.issues, "one code issued, whatever crashed")
				var n int
				require.NoError(t, w.Pool.QueryRow(ctx, `SELECT count(*) FROM vouchers WHERE code IS NOT NULL`).Scan(&n))
				require.Equal(t, 1, n)
			})
		}
	}
}

// A busy issuer releases the run: the client is told the service is
// unavailable, and its retry finishes the voucher.
func TestGuideOperationBusyIsReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, s, op := vouchers(t, phases.Config{})
	s.busy = 1
	body := phases.AsSent([]byte(`{"amount":500}`))
	_, err := phases.Do(ctx, w.Engine, op, w.Tenant, "k", voucherPath, body)
	var unavailable *phases.UnavailableError
	require.ErrorAs(t, err, &unavailable)
	require.NotEmpty(t, unavailable.ObjectID, "the voucher exists")

	later, err := w.Later(ctx, 2*phasestest.Lease, phases.Config{}) // past the next attempt's time
	require.NoError(t, err)
	phases.Register(later, op)
	res, err := phases.Do(ctx, later, op, w.Tenant, "k", voucherPath, body)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.Response.Status)
	require.Equal(t, 1, s.issues)
}
