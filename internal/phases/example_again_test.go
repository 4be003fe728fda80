package phases_test

import (
	"context"
	"fmt"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
)

// letter is what the Again example's operation works on: the service it
// goes through, and that service's answer to this run's call.
type letter struct {
	ID, Via string
	answer  phases.Class
}

// post is POST /v1/letters, sent through "primary" and, if primary
// refuses, through "secondary". The refusal and the move commit together,
// before anything is sent to secondary (Again).
var post = &phases.Operation[*letter]{
	Name: "letters.post", Method: "POST", Path: "/v1/letters",
	Parse: func(path string, _ []byte) (phases.Request, error) {
		return phases.NewRequest("POST", path, struct{}{})
	},
	ObjectID: func(int64, string, phases.Request, phases.Incarnation) string { return "letter_1" },
	Load: func(ctx context.Context, tx *phases.Tx, run *phases.Run[*letter]) (*letter, error) {
		l := &letter{ID: run.ObjectID}
		err := tx.QueryRow(ctx, `SELECT via FROM letters WHERE id = $1`, l.ID).Scan(&l.Via)
		return l, err
	},
	Phases: []phases.Phase[*letter]{{
		To: "letter_created",
		Commit: func(_ context.Context, tx *phases.Tx, run *phases.Run[*letter]) (phases.Next, error) {
			run.Object = &letter{ID: run.ObjectID, Via: "primary"}
			tx.Queue(`INSERT INTO letters (id, via) VALUES ($1, 'primary')`, run.ObjectID)
			return phases.Proceed(), nil
		},
	}, {
		To: phases.Done,
		Call: func(_ context.Context, run *phases.Run[*letter]) (phases.CallOutcome, error) {
			l := run.Object
			l.answer = phases.Success
			if l.Via == "primary" {
				l.answer = phases.Final // primary refuses: it did nothing
			}
			fmt.Println(l.Via+":", l.answer)
			return phases.CallOutcome{Class: l.answer, Service: l.Via}, nil
		},
		Commit: func(_ context.Context, tx *phases.Tx, run *phases.Run[*letter]) (phases.Next, error) {
			l := run.Object
			if l.answer == phases.Final && l.Via == "primary" {
				l.Via = "secondary"
				tx.Queue(`UPDATE letters SET via = $2 WHERE id = $1`, l.ID, l.Via)
				return phases.Again(), nil
			}
			body := fmt.Sprintf(`{"id":%q,"via":%q}`, l.ID, l.Via)
			return phases.Respond(phases.Response{Status: 201, ContentType: "application/json", Body: []byte(body)}), nil
		},
	}},
}

// A refusal moves the letter to the next service and the run goes round
// the call again, in one request.
func Example_again() {
	ctx := context.Background()
	w, err := phasestest.Start(ctx, phases.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	if _, err := w.Pool.Exec(ctx, `CREATE TABLE letters (id text PRIMARY KEY, via text)`); err != nil {
		fmt.Println(err)
		return
	}
	phases.Register(w.Engine, post)
	res, err := phases.Do(ctx, w.Engine, post, w.Tenant, "key-1", "/v1/letters", phases.AsSent([]byte(`{}`)))
	fmt.Println(res.Outcome, res.Response.Status, string(res.Response.Body), err)
	// Output:
	// primary: final_failure
	// secondary: success
	// new 201 {"id":"letter_1","via":"secondary"} <nil>
}
