package phases

import (
	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// The results pipeTx hands back for the statements whose answer is needed
// at once: rows, a row. Each records the error its
// results end with as the transaction's, so that the commit that follows
// fails rather than committing what came before.

// pipeRows closes the exchange's results with the rows, and records an
// error the rows end with as the transaction's.
type pipeRows struct {
	pgx.Rows
	results pgx.BatchResults
	tx      *pipeTx
	done    bool
}

func (r *pipeRows) Close() {
	r.Rows.Close()
	if r.done {
		return
	}
	r.done = true
	err := r.Rows.Err()
	if cerr := r.results.Close(); err == nil {
		err = cerr
	}
	if err != nil && r.tx.err == nil {
		r.tx.err = idempotency.TranslateError(err)
	}
}

func (r *pipeRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return idempotency.TranslateError(err)
	}
	if r.done && r.tx.err != nil {
		return r.tx.err
	}
	return nil
}

// pipeRow is pgx's QueryRow over pipeRows.
type pipeRow struct {
	rows pgx.Rows
	err  error
}

func (r *pipeRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		r.rows.Close()
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
