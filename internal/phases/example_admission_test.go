package phases_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
)

// errNoNote is pin's refusal of a note that does not exist.
var errNoNote = errors.New("no such note")

// pinPath is the requests pin serves.
const pinPath = "/v1/notes/{id}/pin"

// pin is POST /v1/notes/{id}/pin, one phase with no foreign call: it
// commits with the claim. Admit reads the note in the claim's transaction
// first, and its refusal rolls the claim back.
var pin = &phases.Operation[string]{
	Name: "notes.pin", Method: "POST", Path: pinPath,
	Parse: func(path string, _ []byte) (phases.Request, error) {
		return phases.NewRequest("POST", path, struct{}{})
	},
	Admit: func(ctx context.Context, tx *phases.Tx, _ int64, req phases.Request) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pins WHERE id = $1`,
			phases.Segment(pinPath, req.Path, "id")).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errNoNote
		}
		return nil
	},
	ObjectID: func(_ int64, _ string, req phases.Request, _ phases.Incarnation) string {
		return phases.Segment(pinPath, req.Path, "id")
	},
	Load: func(_ context.Context, _ *phases.Tx, run *phases.Run[string]) (string, error) {
		return run.ObjectID, nil
	},
	Phases: []phases.Phase[string]{{
		To: phases.Done,
		Commit: func(_ context.Context, tx *phases.Tx, run *phases.Run[string]) (phases.Next, error) {
			tx.Queue(`UPDATE pins SET pinned = true WHERE id = $1`, run.ObjectID)
			body := fmt.Sprintf(`{"pinned":%q}`, run.ObjectID)
			return phases.Respond(phases.Response{Status: 200, ContentType: "application/json", Body: []byte(body)}), nil
		},
	}},
}

// A request Admit turns away leaves no key: once the note exists, the
// same key runs the request as new.
func Example_admission() {
	ctx := context.Background()
	w, err := phasestest.Start(ctx, phases.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	if _, err := w.Pool.Exec(ctx, `CREATE TABLE pins (id text PRIMARY KEY, pinned boolean DEFAULT false)`); err != nil {
		fmt.Println(err)
		return
	}
	phases.Register(w.Engine, pin)
	do := func() {
		res, err := phases.Do(ctx, w.Engine, pin, w.Tenant, "key-1", "/v1/notes/note_9/pin", phases.AsSent([]byte(`{}`)))
		if errors.Is(err, errNoNote) {
			fmt.Println("refused:", errNoNote)
			return
		}
		fmt.Println(res.Outcome, res.Response.Status, string(res.Response.Body), err)
	}
	do()
	if _, err := w.Pool.Exec(ctx, `INSERT INTO pins (id) VALUES ('note_9')`); err != nil {
		fmt.Println(err)
		return
	}
	do()
	// Output:
	// refused: no such note
	// new 200 {"pinned":"note_9"} <nil>
}
