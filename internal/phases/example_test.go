package phases_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/harness/testdb"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
)

// note is what the example's operation works on.
type note struct{ ID, Body string }

// A two-arrow operation, POST /v1/notes {"body": "..."}, against a real
// database: the note is created with the claim (start → note_created), a
// foreign call delivers it, and the delivery and the answer commit
// together (note_created → done). The second request with the same key is
// a retry: it is answered from the stored answer, and the foreign call is
// not made again.
func Example() {
	ctx := context.Background()
	url, drop, err := testdb.Create(ctx) // a fresh migrated database
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop() //nolint:errcheck // a test database
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('example') RETURNING id`).Scan(&tenant); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE notes (tenant_id bigint, id text, body text,
		delivered boolean NOT NULL DEFAULT false, PRIMARY KEY (tenant_id, id))`); err != nil {
		fmt.Println(err)
		return
	}

	send := &phases.Operation[*note]{
		Name: "notes.send", ResumeSpan: "notes.send.resume", Path: "/v1/notes",
		ObjectID: func(idempotency.Canonical) string { return "note_1" },
		Load: func(ctx context.Context, q idempotency.DBTX, lease *idempotency.Lease) (*note, error) {
			n := &note{ID: lease.Record.ObjectID}
			err := q.QueryRow(ctx, `SELECT body FROM notes WHERE tenant_id = $1 AND id = $2`,
				lease.Record.TenantID, n.ID).Scan(&n.Body)
			return n, err
		},
		// tx 1, with the claim: the note, before anything leaves.
		WithClaim: []phases.Arrow[*note]{{
			To: "note_created",
			Commit: func(_ context.Context, tx *phases.Tx, run *phases.Run[*note]) (phases.Transition, error) {
				var p struct{ Body string }
				if err := json.Unmarshal(run.Request().Body, &p); err != nil {
					return phases.Transition{}, err
				}
				run.Object = &note{ID: run.ObjectID, Body: p.Body}
				tx.Queue(`INSERT INTO notes (tenant_id, id, body) VALUES ($1, $2, $3)`,
					run.Lease.Record.TenantID, run.ObjectID, p.Body)
				return phases.Next(), nil
			},
		}},
		// tx 2, after the foreign call: the delivery, and the answer stored.
		Steps: []phases.Step[*note]{{
			Call: func(_ context.Context, run *phases.Run[*note]) (psp.Outcome, error) {
				// A real call would carry a key derived from the note
				// ("note_1:deliver") and be classified by its answer.
				fmt.Println("delivering", run.Object.ID, run.Object.Body)
				return psp.Outcome{Class: psp.ClassSuccess}, nil
			},
			Arrows: []phases.Arrow[*note]{{
				To: idempotency.PointDone,
				Commit: func(_ context.Context, tx *phases.Tx, run *phases.Run[*note]) (phases.Transition, error) {
					tx.Queue(`UPDATE notes SET delivered = true WHERE tenant_id = $1 AND id = $2`,
						run.Lease.Record.TenantID, run.Object.ID)
					body := fmt.Sprintf(`{"id":%q,"delivered":true}`, run.Object.ID)
					return phases.Respond(idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(body)}), nil
				},
			}},
		}},
	}

	keys, err := idempotency.NewStore(idempotency.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	engine, err := phases.New(pool, keys, phases.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	phases.Register(engine, send)

	req, err := idempotency.CanonicalizeParams("POST", "/v1/notes", map[string]string{"body": "hello"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		res, err := phases.Do(ctx, engine, send, tenant, "key-1", phases.Parsed(req))
		fmt.Println(res.Outcome, res.Response.Status, string(res.Response.Body), err)
	}
	// Output:
	// delivering note_1 hello
	// new 201 {"id":"note_1","delivered":true} <nil>
	// replay 201 {"id":"note_1","delivered":true} <nil>
}
