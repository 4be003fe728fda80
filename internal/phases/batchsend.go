package phases

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/sqlbatch"
)

// The crash points inside a batch of many requests, for the chaos run and
// tests (Config.CrashHook). They are passed only when a hook is set, and
// then the batch goes out in two exchanges: BEGIN and its first half,
// CrashInBatch, the rest and COMMIT, CrashAfterBatch.
var (
	// CrashInBatch falls between a batch's statements, before its commit.
	CrashInBatch = CrashPoint{"in_batch"}
	// CrashAfterBatch falls after a batch committed, before any of its
	// requests learned so.
	CrashAfterBatch = CrashPoint{"after_batch"}
)

// errBatchRefused is a batch the database refused before committing
// anything: each of its requests runs alone.
var errBatchRefused = errors.New("batch refused: each request runs alone")

// batchTimeout bounds a batch's exchange. It runs for requests other than
// the one whose goroutine sends it, so that request's deadline is not
// theirs.
const batchTimeout = 30 * time.Second

// sendBatch sends jobs' statements as one set-based statement each, in one
// transaction, and hands each job's rows to its scans once it committed.
// It returns each job's outcome (nil, or a *CallbackError), or an error
// for all: errBatchRefused when nothing committed, any other when the
// outcome is unknown.
func (e *Engine) sendBatch(ctx context.Context, jobs []*batchJob) ([]error, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return nil, errBatchRefused
	}
	defer conn.Release()
	c := conn.Conn()
	stmts, err := e.batchStatements(ctx, c, jobs)
	if err != nil {
		e.log.WarnContext(ctx, "a batch could not be prepared: each request runs alone", "error", err.Error())
		return nil, errBatchRefused
	}
	results, err := e.exchangeBatch(ctx, c, stmts)
	if err != nil {
		if dbstate.StaleStatement(err) {
			// The server forgot a prepared form (DISCARD ALL, say): the
			// connection's next transaction prepares them all again.
			statementsOn(c).stale = true
		}
		if _, ok := errors.AsType[*pgconn.PgError](err); ok && !c.PgConn().IsClosed() {
			return nil, errBatchRefused
		}
		return nil, err
	}
	if err := e.crash(ctx, CrashAfterBatch); err != nil {
		return nil, err
	}
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		var cbErr error
		for p, q := range j.tx.pending {
			if q.scan == nil {
				continue
			}
			if err := q.scan(results[p].row(c.TypeMap(), i)); err != nil && cbErr == nil {
				cbErr = err
			}
		}
		j.tx.pending, j.tx.closed = nil, true
		errs[i] = committed(cbErr)
	}
	return errs, nil
}

// batchStatement is one set-based statement of a batch, encoded.
type batchStatement struct {
	sd      *pgconn.StatementDescription
	named   bool
	params  [][]byte
	formats []int16
	results []int16
}

// batchStatements encodes the set-based form of each statement jobs queue,
// its parameter $i the array of every job's $i.
func (e *Engine) batchStatements(ctx context.Context, c *pgx.Conn, jobs []*batchJob) ([]batchStatement, error) {
	shape := jobs[0].tx.pending
	out := make([]batchStatement, len(shape))
	for p, q := range shape {
		many, ok := sqlbatch.Of(q.sql)
		if !ok {
			return nil, fmt.Errorf("no set-based form of %.60q…", q.sql)
		}
		sd, named, err := describe(ctx, c, many)
		if err != nil {
			return nil, err
		}
		args := []any{len(jobs)}
		if len(q.args) > 0 {
			args = make([]any, len(q.args))
			for k := range args {
				col := make([]any, len(jobs))
				for i, j := range jobs {
					col[i] = j.tx.pending[p].args[k]
				}
				args[k] = col
			}
		}
		if len(args) != len(sd.ParamOIDs) {
			return nil, fmt.Errorf("the set-based form of %.60q… takes %d parameters, not %d", q.sql, len(sd.ParamOIDs), len(args))
		}
		st := batchStatement{sd: sd, named: named, params: make([][]byte, len(args)), formats: make([]int16, len(args))}
		m := c.TypeMap()
		for k, a := range args {
			// Binary where the codec takes the Go value the statement
			// alone was given (parsing arrays as text costs the server
			// more than the rest of a batch's parameters), text where it
			// does not (a string for a uuid, say).
			oid := sd.ParamOIDs[k]
			st.formats[k] = pgtype.BinaryFormatCode
			if st.params[k], err = m.Encode(oid, st.formats[k], a, nil); err != nil {
				st.formats[k] = pgtype.TextFormatCode
				if st.params[k], err = m.Encode(oid, st.formats[k], a, nil); err != nil {
					return nil, fmt.Errorf("the set-based form of %.60q…, parameter $%d: %w", q.sql, k+1, err)
				}
			}
		}
		st.results = make([]int16, len(sd.Fields))
		for k, f := range sd.Fields {
			st.results[k] = m.FormatCodeForOID(f.DataTypeOID)
		}
		out[p] = st
	}
	return out, nil
}

// described holds the descriptions of set-based forms for connections
// that cannot keep a statement prepared (behind a transaction pooler).
// A form's parameter and column types do not change while the schema
// does not.
var described sync.Map // SQL → *pgconn.StatementDescription

// describe returns the description of a set-based form: prepared by its
// SQL on c in pgx's default exec mode, as pipeTx.prepare does, or
// described once per process otherwise, and sent with each batch.
func describe(ctx context.Context, c *pgx.Conn, sql string) (_ *pgconn.StatementDescription, named bool, _ error) {
	if c.Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		sd, err := c.Prepare(ctx, sql, sql)
		return sd, true, err
	}
	if v, ok := described.Load(sql); ok {
		return v.(*pgconn.StatementDescription), false, nil
	}
	sd, err := c.PgConn().Prepare(ctx, "", sql, nil)
	if err != nil {
		return nil, false, err
	}
	described.Store(sql, sd)
	return sd, false, nil
}

// batchResult is what one set-based statement answered.
type batchResult struct {
	fields []pgconn.FieldDescription
	rows   [][][]byte
}

// row is the i-th request's row, or no row if the statement answered
// fewer than its requests (the scan meets pgx.ErrNoRows, as alone).
func (r batchResult) row(m *pgtype.Map, i int) pgx.Row {
	if i >= len(r.rows) {
		return errRow{pgx.ErrNoRows}
	}
	return bufferedRow{m: m, fields: r.fields, values: r.rows[i]}
}

// exchangeBatch sends stmts in one implicit transaction (one Sync), or,
// with a crash hook set, in an explicit one over two exchanges with
// CrashInBatch between them.
func (e *Engine) exchangeBatch(ctx context.Context, c *pgx.Conn, stmts []batchStatement) ([]batchResult, error) {
	pc := c.PgConn()
	queue := func(b *pgconn.Batch, st batchStatement) {
		if st.named {
			b.ExecPrepared(st.sd.Name, st.params, st.formats, st.results)
		} else {
			b.ExecParams(st.sd.SQL, st.params, st.sd.ParamOIDs, st.formats, st.results)
		}
	}
	read := func(b *pgconn.Batch, skip int) ([]*pgconn.Result, error) {
		rs, err := pc.ExecBatch(ctx, b).ReadAll()
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if r.Err != nil {
				return nil, r.Err
			}
		}
		return rs[skip:], nil
	}
	var all []*pgconn.Result
	if e.cfg.CrashHook == nil {
		b := &pgconn.Batch{}
		for _, st := range stmts {
			queue(b, st)
		}
		rs, err := read(b, 0)
		if err != nil {
			return nil, err
		}
		all = rs
	} else {
		half := len(stmts) / 2
		b := &pgconn.Batch{}
		b.ExecParams(beginSQL, nil, nil, nil, nil)
		for _, st := range stmts[:half] {
			queue(b, st)
		}
		rs, err := read(b, 1)
		if err != nil {
			return nil, err
		}
		if err := e.crash(ctx, CrashInBatch); err != nil {
			// As if the process died: the connection goes, and with
			// it the open transaction.
			_ = pc.Close(ctx)
			return nil, err
		}
		b = &pgconn.Batch{}
		for _, st := range stmts[half:] {
			queue(b, st)
		}
		b.ExecParams(commitSQL, nil, nil, nil, nil)
		rest, err := read(b, 0)
		if err != nil {
			return nil, err
		}
		if tag := rest[len(rest)-1].CommandTag; tag.String() != "COMMIT" {
			return nil, &pgconn.PgError{Code: "25P02", Message: "batch rolled back at its commit: " + tag.String()}
		}
		all = append(rs, rest[:len(rest)-1]...)
	}
	out := make([]batchResult, len(all))
	for p, r := range all {
		out[p] = batchResult{fields: r.FieldDescriptions, rows: r.Rows}
	}
	return out, nil
}

// bufferedRow is pgx's Row over a row read and kept.
type bufferedRow struct {
	m      *pgtype.Map
	fields []pgconn.FieldDescription
	values [][]byte
}

func (r bufferedRow) Scan(dest ...any) error {
	if len(dest) != len(r.values) {
		return fmt.Errorf("scan: %d columns, %d destinations", len(r.values), len(dest))
	}
	for k, d := range dest {
		f := r.fields[k]
		if err := r.m.Scan(f.DataTypeOID, f.Format, r.values[k], d); err != nil {
			return fmt.Errorf("scan column %s: %w", f.Name, err)
		}
	}
	return nil
}
