package phases_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
)

// note is what the example's operation works on.
type note struct{ ID, Body string }

// send is POST /v1/notes {"body": "..."}, in two phases. The note is
// created with the claim (start → note_created). A foreign call delivers
// it, and the delivery and the answer commit together (note_created →
// done).
var send = &phases.Operation[*note]{
	Name: "notes.send", Method: "POST", Path: "/v1/notes",
	Parse: func(path string, body []byte) (phases.Request, error) {
		var p struct {
			Body string `json:"body"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return phases.Request{}, err
		}
		return phases.NewRequest("POST", path, p)
	},
	ObjectID: func(int64, string, phases.Request, phases.Incarnation) string { return "note_1" },
	Load: func(ctx context.Context, tx *phases.Tx, run *phases.Run[*note]) (*note, error) {
		n := &note{ID: run.ObjectID}
		err := tx.QueryRow(ctx, `SELECT body FROM notes WHERE id = $1`, n.ID).Scan(&n.Body)
		return n, err
	},
	Phases: []phases.Phase[*note]{{
		// tx 1, with the claim: the note, before anything leaves.
		To: "note_created",
		Commit: func(_ context.Context, tx *phases.Tx, run *phases.Run[*note]) (phases.Next, error) {
			var p struct{ Body string }
			if err := json.Unmarshal(run.Request().Body, &p); err != nil {
				return phases.Next{}, err
			}
			run.Object = &note{ID: run.ObjectID, Body: p.Body}
			tx.Queue(`INSERT INTO notes (id, body) VALUES ($1, $2)`, run.ObjectID, p.Body)
			return phases.Proceed(), nil
		},
	}, {
		// tx 2, after the foreign call: the delivery, and the answer stored.
		To: phases.Done,
		Call: func(_ context.Context, run *phases.Run[*note]) (phases.CallOutcome, error) {
			// A real call carries a key derived from the note
			// ("note_1:deliver"), and its answer gets a class.
			fmt.Println("delivering", run.Object.ID, run.Object.Body)
			return phases.CallOutcome{Class: phases.Success}, nil
		},
		Commit: func(_ context.Context, tx *phases.Tx, run *phases.Run[*note]) (phases.Next, error) {
			tx.Queue(`UPDATE notes SET delivered = true WHERE id = $1`, run.Object.ID)
			body := fmt.Sprintf(`{"id":%q,"delivered":true}`, run.Object.ID)
			return phases.Respond(phases.Response{Status: 201, ContentType: "application/json", Body: []byte(body)}), nil
		},
	}},
}

// A new request runs both phases and makes the foreign call. A retry with
// the same key gets the stored answer, and the call is not made again.
func Example() {
	ctx := context.Background()
	w, err := phasestest.Start(ctx, phases.Config{}) // a migrated database, a tenant, an engine
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	if _, err := w.Pool.Exec(ctx, `CREATE TABLE notes (id text PRIMARY KEY, body text, delivered boolean DEFAULT false)`); err != nil {
		fmt.Println(err)
		return
	}
	phases.Register(w.Engine, send)

	for range 2 {
		res, err := phases.Do(ctx, w.Engine, send, w.Tenant, "key-1", "/v1/notes", phases.AsSent([]byte(`{"body":"hello"}`)))
		fmt.Println(res.Outcome, res.Response.Status, string(res.Response.Body), err)
	}
	// Output:
	// delivering note_1 hello
	// new 201 {"id":"note_1","delivered":true} <nil>
	// replay 201 {"id":"note_1","delivered":true} <nil>
}
