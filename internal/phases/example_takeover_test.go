package phases_test

import (
	"context"
	"fmt"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
)

// ticket is what the takeover example's operation works on.
type ticket struct{ ID, Seat string }

// book is POST /v1/tickets: a ticket with the claim, then a foreign call
// books its seat under a key derived from the ticket. The service answers
// a key it has seen with its first answer, as a PSP does.
func book(seats map[string]string) *phases.Operation[*ticket] {
	return &phases.Operation[*ticket]{
		Name: "tickets.book", Method: "POST", Path: "/v1/tickets",
		Parse: func(path string, _ []byte) (phases.Request, error) {
			return phases.NewRequest("POST", path, struct{}{})
		},
		ObjectID: func(int64, string, phases.Request, phases.Incarnation) string { return "ticket_1" },
		Load: func(ctx context.Context, tx *phases.Tx, run *phases.Run[*ticket]) (*ticket, error) {
			t := &ticket{}
			err := tx.QueryRow(ctx, `SELECT id FROM tickets WHERE id = $1`, run.ObjectID).Scan(&t.ID)
			return t, err
		},
		Phases: []phases.Phase[*ticket]{{
			To: "ticket_created",
			Commit: func(_ context.Context, tx *phases.Tx, run *phases.Run[*ticket]) (phases.Next, error) {
				run.Object = &ticket{ID: run.ObjectID}
				tx.Queue(`INSERT INTO tickets (id) VALUES ($1)`, run.ObjectID)
				return phases.Proceed(), nil
			},
		}, {
			To: phases.Done,
			Call: func(_ context.Context, run *phases.Run[*ticket]) (phases.CallOutcome, error) {
				key := run.Object.ID + ":book"
				fmt.Printf("booking under %s (fresh: %v)\n", key, run.Fresh)
				if _, ok := seats[key]; !ok {
					seats[key] = "12A"
				}
				run.Object.Seat = seats[key]
				return phases.CallOutcome{Class: phases.Success}, nil
			},
			Commit: func(_ context.Context, tx *phases.Tx, run *phases.Run[*ticket]) (phases.Next, error) {
				tx.Queue(`UPDATE tickets SET seat = $2 WHERE id = $1`, run.Object.ID, run.Object.Seat)
				body := fmt.Sprintf(`{"ticket":%q,"seat":%q}`, run.Object.ID, run.Object.Seat)
				return phases.Respond(phases.Response{Status: 201, ContentType: "application/json", Body: []byte(body)}), nil
			},
		}},
	}
}

// A process dies after the service answered and before the answer
// committed. Another process, once the lease ran out, takes the key over:
// it resumes at ticket_created and calls again under the same key, not
// Fresh, and the service answers with its first answer.
func Example_takeover() {
	ctx := context.Background()
	w, err := phasestest.Start(ctx, phases.Config{CrashHook: phasestest.CrashAt(phases.CrashAfterCall)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	if _, err := w.Pool.Exec(ctx, `CREATE TABLE tickets (id text PRIMARY KEY, seat text)`); err != nil {
		fmt.Println(err)
		return
	}
	op := book(map[string]string{})
	phases.Register(w.Engine, op)
	_, err = phases.Do(ctx, w.Engine, op, w.Tenant, "key-1", "/v1/tickets", phases.AsSent([]byte(`{}`)))
	fmt.Println("the first process:", err)

	later, err := w.Later(ctx, 2*phasestest.Lease, phases.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	phases.Register(later, op)
	res, err := phases.Do(ctx, later, op, w.Tenant, "key-1", "/v1/tickets", phases.AsSent([]byte(`{}`)))
	fmt.Println(res.Outcome, string(res.Response.Body), err)
	// Output:
	// booking under ticket_1:book (fresh: true)
	// the first process: simulated crash
	// booking under ticket_1:book (fresh: false)
	// takeover {"ticket":"ticket_1","seat":"12A"} <nil>
}
