package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Commits counts transactions per new charge, measured, in one mode.
type Commits struct {
	Mode string `json:"mode"`
	// Charges is how many new charges the count is over.
	Charges int `json:"charges"`
	// Xact is pg_stat_database.xact_commit per charge: every committed
	// transaction, read-only ones included.
	Xact float64 `json:"xact_commit"`
	// Durable is WAL COMMIT records per charge (pg_waldump): the commits
	// that write and flush WAL. -1 if pg_waldump could not read the WAL.
	Durable float64 `json:"durable_wal_commits"`
}

// commits counts, for n new charges sent one at a time, the transactions
// committed in the benchmark's database (pg_stat_database) and the COMMIT
// records in the WAL (pg_waldump). The API is stopped before the count is
// read, so its backends have flushed their statistics.
func (e *env) commits(ctx context.Context, res *Results) error {
	for _, mode := range []struct {
		name      string
		oneCommit bool
	}{{"folded (default)", false}, {"one commit per phase", true}} {
		const n = 500
		base, stop, err := e.startStack(ctx, map[string]string{"ONE_COMMIT_PER_PHASE": strconv.FormatBool(mode.oneCommit)})
		if err != nil {
			return err
		}
		// Warm up: connections, prepared statements, the auth cache.
		load(ctx, e.hc, base, e.apiKey, 1, 500*time.Millisecond, 201, func(w, i int) request {
			return request{keyf("warm-%v-%d", mode.oneCommit, i), []byte(visa)}
		}, nil)
		time.Sleep(1500 * time.Millisecond) // let the warm-up's statistics flush
		xact0, lsn0, err := e.dbCounters(ctx)
		if err != nil {
			stop()
			return err
		}
		sent := 0
		for i := range n {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/charges", strings.NewReader(visa))
			req.Header.Set("Authorization", "Bearer "+e.apiKey)
			req.Header.Set("Idempotency-Key", keyf("commits-%v-%d", mode.oneCommit, i))
			req.Header.Set("Content-Type", "application/json")
			resp, err := e.hc.Do(req)
			if err != nil {
				stop()
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				sent++
			}
		}
		stop()
		time.Sleep(500 * time.Millisecond)
		xact1, lsn1, err := e.dbCounters(ctx)
		if err != nil {
			return err
		}
		c := Commits{Mode: mode.name, Charges: sent, Xact: float64(xact1-xact0) / float64(sent), Durable: -1}
		if walCommits, err := walCommits(ctx, e.admin, lsn0, lsn1); err == nil {
			c.Durable = float64(walCommits) / float64(sent)
		} else {
			e.log("  pg_waldump: %v", err)
		}
		res.Commits = append(res.Commits, c)
		e.log("  %s: %.2f xact_commit, %.2f WAL commits per charge", c.Mode, c.Xact, c.Durable)
	}
	return nil
}

// dbCounters reads xact_commit of the benchmark's database and the WAL
// position, from the admin connection (whose own transactions are in
// another database).
func (e *env) dbCounters(ctx context.Context) (xact int64, lsn string, err error) {
	if _, err := e.admin.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return 0, "", err
	}
	err = e.admin.QueryRow(ctx, `SELECT xact_commit, pg_current_wal_lsn()::text FROM pg_stat_database WHERE datname = $1`, e.dbName).Scan(&xact, &lsn)
	return xact, lsn, err
}

var walCommitRE = regexp.MustCompile(`Transaction/COMMIT\s+(\d+)`)

func walCommits(ctx context.Context, admin *pgx.Conn, from, to string) (int64, error) {
	var dataDir string
	if err := admin.QueryRow(ctx, `SHOW data_directory`).Scan(&dataDir); err != nil {
		return 0, err
	}
	bin := "pg_waldump"
	if p, err := exec.LookPath(bin); err == nil {
		bin = p
	} else if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_waldump"); len(m) > 0 {
		bin = m[len(m)-1]
	}
	out, err := exec.CommandContext(ctx, bin, "--stats=record", "-p", filepath.Join(dataDir, "pg_wal"), "-s", from, "-e", to).CombinedOutput()
	m := walCommitRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}
