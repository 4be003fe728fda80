package bench

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The plans of the growth step's passes (passes.go): what each ran,
// explained as phasepay's processes plan it.

// statementRecorder records the statements a pool runs while on: the
// plans of a pass are those of what it ran.
type statementRecorder struct {
	mu    sync.Mutex
	on    bool
	pass  string
	stmts []recorded
}

type recorded struct {
	pass, sql string
	args      []any
	// noJIT: the statement followed set_config('jit', 'off', true) in its
	// batch, and was planned so.
	noJIT bool
}

func (r *statementRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.stmts = append(r.stmts, recorded{pass: r.pass, sql: d.SQL, args: d.Args})
	}
	return ctx
}

func (r *statementRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The statements of a batch are recorded too: the deliverer sends its walks
// in one (webhooks.collectWithoutJIT).

func (r *statementRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *statementRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		n := len(r.stmts)
		noJIT := n > 0 && strings.Contains(r.stmts[n-1].sql, "set_config('jit', 'off', true)")
		r.stmts = append(r.stmts, recorded{pass: r.pass, sql: d.SQL, args: d.Args, noJIT: noJIT})
	}
}

func (r *statementRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (r *statementRecorder) record(pass string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.pass = pass != "", pass
}

// ignoredStatements are what a pass runs that reads no table a backlog
// grows: transaction control and session settings.
func ignoredStatement(sql string) bool {
	s := strings.ToUpper(strings.TrimSpace(sql))
	for _, p := range []string{"BEGIN", "COMMIT", "ROLLBACK", "SELECT SET_CONFIG", "SAVEPOINT", "RELEASE", "DROP TABLE", "ALTER TABLE"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return !strings.Contains(sql, "webhook_deliveries") && !strings.Contains(sql, "idempotency_keys") &&
		!strings.Contains(sql, "events") && !strings.Contains(sql, "_p2")
}

// plans runs each pass once with its statements recorded, and explains
// each statement it ran (EXPLAIN ANALYZE, in a transaction rolled back)
// in the generic plan phasepay's connections make.
func (w *passesWorld) plans(ctx context.Context) ([]PassPlan, error) {
	for _, name := range passNames {
		run, err := w.pass(name)
		if err != nil {
			return nil, err
		}
		w.recorder.record(name)
		_, err = run(ctx)
		w.recorder.record("")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	conn, err := pgx.Connect(ctx, w.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		return nil, err
	}
	var out []PassPlan
	seen := map[string]bool{}
	w.recorder.mu.Lock()
	stmts := w.recorder.stmts
	w.recorder.mu.Unlock()
	for i, s := range stmts {
		if ignoredStatement(s.sql) || seen[s.pass+s.sql] {
			continue
		}
		seen[s.pass+s.sql] = true
		jit := "on"
		if s.noJIT {
			jit = "off"
		}
		if _, err := conn.Exec(ctx, "SET jit = "+jit); err != nil {
			return nil, err
		}
		plan, err := explain(ctx, conn, fmt.Sprintf("s%d", i), s.sql, s.args)
		if err != nil {
			return nil, fmt.Errorf("%s: explain %q: %w", s.pass, firstLine(s.sql), err)
		}
		out = append(out, PassPlan{Pass: s.pass, Plan: trimPlan(plan)})
	}
	return out, nil
}

func firstLine(sql string) string {
	sql = strings.TrimSpace(sql)
	if i := strings.IndexByte(sql, '\n'); i > 0 {
		return sql[:i]
	}
	return sql
}

// explain explains sql's execution with args, in a transaction rolled
// back, as phasepay runs it: the statement's text, then its plan. A
// statement sent with its values (the simple protocol) is explained with
// them; any other is prepared as name and explained in its generic plan,
// the arguments sent as literals of its parameter types (EXECUTE takes no
// parameters of its own).
func explain(ctx context.Context, conn *pgx.Conn, name, sql string, args []any) (string, error) {
	var (
		values []any
		simple bool
	)
	for _, a := range args {
		if m, ok := a.(pgx.QueryExecMode); ok {
			simple = m == pgx.QueryExecModeSimpleProtocol
			continue
		}
		values = append(values, a)
	}
	if simple {
		return explainWith(ctx, conn, sql, "EXPLAIN (ANALYZE, BUFFERS) "+sql, append([]any{pgx.QueryExecModeSimpleProtocol}, values...))
	}
	sd, err := conn.Prepare(ctx, name, sql)
	if err != nil {
		return "", err
	}
	if len(sd.ParamOIDs) != len(values) {
		return "", fmt.Errorf("%d parameters, %d arguments", len(sd.ParamOIDs), len(values))
	}
	lits := make([]string, len(values))
	for i, v := range values {
		buf, err := conn.TypeMap().Encode(sd.ParamOIDs[i], pgtype.TextFormatCode, v, nil)
		if err != nil {
			return "", fmt.Errorf("argument %d: %w", i+1, err)
		}
		lits[i] = "NULL"
		if buf != nil {
			lits[i] = "'" + strings.ReplaceAll(string(buf), "'", "''") + "'"
		}
	}
	stmt := "EXPLAIN (ANALYZE, BUFFERS) EXECUTE " + name
	if len(lits) > 0 {
		stmt += "(" + strings.Join(lits, ", ") + ")"
	}
	return explainWith(ctx, conn, sql, stmt, []any{pgx.QueryExecModeSimpleProtocol})
}

// explainWith runs an EXPLAIN of sql in a transaction rolled back.
func explainWith(ctx context.Context, conn *pgx.Conn, sql, stmt string, args []any) (string, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // an explained write is not kept
	rows, err := tx.Query(ctx, stmt, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(sql) + "\n\n" + strings.Join(lines, "\n"), nil
}

// emptyPartitionScan is a plan node scanning a day partition that returned
// nothing: one per day kept, most of every plan's lines.
var emptyPartitionScan = regexp.MustCompile(`^\s*->\s+.*Scan.* on \w+_p\d{8}\b.*(?:actual (?:time=\S+ )?rows=0 loops=\d+\)|\(never executed\))`)

// readRows is a node's detail that says it read rows: rows it threw away,
// or heap pages it visited.
var readRows = regexp.MustCompile(`Rows Removed by (?:Join )?(?:Filter|Index Recheck): [1-9]|Heap Blocks:`)

// trimPlan leaves out of a plan the scans of day partitions that returned
// no row and read none (no row thrown away, no heap page visited), with
// their details, and says how many it left out. A scan that returned
// nothing because it threw everything away stays: it is what a plan that
// reads its backlog looks like.
func trimPlan(plan string) string {
	var (
		out    []string
		block  []string // the empty scan being looked at, and its details
		indent = -1     // its indentation
		missed int
	)
	flush := func() {
		kept := false
		for _, l := range block {
			kept = kept || readRows.MatchString(l)
		}
		if kept {
			out = append(out, block...)
		} else if len(block) > 0 {
			missed++
		}
		block, indent = nil, -1
	}
	for _, line := range strings.Split(plan, "\n") {
		in := len(line) - len(strings.TrimLeft(line, " "))
		if indent >= 0 {
			if in > indent {
				block = append(block, line) // the node's details and children
				continue
			}
			flush()
		}
		if emptyPartitionScan.MatchString(line) {
			block, indent = []string{line}, in
			continue
		}
		out = append(out, line)
	}
	flush()
	if missed > 0 {
		out = append(out, fmt.Sprintf("(%d scans of day partitions that returned and read no row left out)", missed))
	}
	return strings.Join(out, "\n")
}
