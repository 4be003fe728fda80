package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// Baseline is one pgbench run: what PostgreSQL itself does on this machine.
type Baseline struct {
	Clients    int     `json:"clients"`
	TPS        float64 `json:"tps"`
	LatencyAvg float64 `json:"latency_avg_ms"`
}

// Baselines are pgbench's numbers per level.
type Baselines struct {
	Insert []Baseline `json:"insert_commit"`
	Select []Baseline `json:"pk_select_1m"`
}

// pgbenchInsert commits one row shaped like an idempotency key per
// transaction: the durable write a new charge cannot do without.
const pgbenchInsert = `\set k random(1, 9000000000000000)
INSERT INTO bench_keys (tenant_id, key, fingerprint, request_method, request_path, request_body, locked_until)
VALUES (1, :client_id || '-' || :k, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea,
        'POST', '/v1/charges', '{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}', now() + interval '60 s');
`

// pgbenchSelect is a primary-key read on a table of 1 M such rows: the read
// a replay cannot do without.
const pgbenchSelect = `\set n random(1, 1000000)
SELECT * FROM bench_select WHERE tenant_id = 1 AND key = 'k' || :n;
`

var (
	tpsRE = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	latRE = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
)

func pgbenchPath() string {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	return "pgbench"
}

func runPgbench(ctx context.Context, dbURL, script string, clients int, dur time.Duration) (Baseline, error) {
	f, err := os.CreateTemp("", "pgbench-*.sql")
	if err != nil {
		return Baseline{}, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		return Baseline{}, err
	}
	f.Close()
	cmd := exec.CommandContext(ctx, pgbenchPath(), "-n", "-M", "prepared", "-f", f.Name(),
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)), "-T", strconv.Itoa(int(dur.Seconds())), dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Baseline{}, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	b := Baseline{Clients: clients}
	if m := tpsRE.FindSubmatch(out); m != nil {
		b.TPS, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if m := latRE.FindSubmatch(out); m != nil {
		b.LatencyAvg, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if b.TPS == 0 {
		return Baseline{}, fmt.Errorf("pgbench: no tps in output:\n%s", out)
	}
	return b, nil
}

func (e *env) baselines(ctx context.Context, res *Results) error {
	// Tables shaped like idempotency_keys (its columns, defaults, checks
	// and primary key), unpartitioned.
	if _, err := e.pool.Exec(ctx, `CREATE TABLE bench_keys (LIKE idempotency_keys INCLUDING ALL)`); err != nil {
		return err
	}
	if err := e.selectTable(ctx); err != nil {
		return err
	}
	for _, c := range e.cfg.Levels {
		ins, err := runPgbench(ctx, e.dbURL, pgbenchInsert, c, e.cfg.Duration)
		if err != nil {
			return err
		}
		sel, err := runPgbench(ctx, e.dbURL, pgbenchSelect, c, e.cfg.Duration)
		if err != nil {
			return err
		}
		res.Baseline.Insert = append(res.Baseline.Insert, ins)
		res.Baseline.Select = append(res.Baseline.Select, sel)
		e.log("  %2d clients: INSERT %.0f tps (%.2f ms), SELECT %.0f tps (%.3f ms)", c, ins.TPS, ins.LatencyAvg, sel.TPS, sel.LatencyAvg)
	}
	// bench_select stays, for the PK SELECT run beside the replays.
	_, err := e.pool.Exec(ctx, `DROP TABLE bench_keys`)
	return err
}

// selectTable creates and fills bench_select, pgbenchSelect's table of 1 M
// rows shaped like finished idempotency keys (unpartitioned), unless it
// exists.
func (e *env) selectTable(ctx context.Context) error {
	var exists bool
	if err := e.pool.QueryRow(ctx, `SELECT to_regclass('bench_select') IS NOT NULL`).Scan(&exists); err != nil || exists {
		return err
	}
	for _, stmt := range []string{
		`CREATE TABLE bench_select (LIKE idempotency_keys INCLUDING ALL)`,
		`INSERT INTO bench_select (tenant_id, key, fingerprint, request_method, request_path, request_body,
		        state, recovery_point, response_status, response_content_type, response_body)
		 SELECT 1, 'k' || g, sha256(g::text::bytea), 'POST', '/v1/charges', convert_to('` + visa + `', 'UTF8'),
		        'done', 'done', 201, 'application/json', convert_to(repeat('x', 260), 'UTF8')
		   FROM generate_series(1, 1000000) g`,
		`VACUUM ANALYZE bench_select`,
	} {
		if _, err := e.pool.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}
