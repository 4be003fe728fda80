package profile

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/tools/procs"
)

// snapshot is the counters read before and after the measured charges.
type snapshot struct {
	tables  map[string]TableCounts
	wal     WALStats
	lsn     string
	backend map[int]int64 // ticks of the database's client backends
	other   map[int]int64 // ticks of the cluster's other processes
	api     int64
}

// activitySQL lists the cluster's server processes but the profile's own
// connection: the database's client backends (the api's pool) apart from
// the rest (checkpointer, WAL writer, background writer, …).
const activitySQL = `
SELECT pid, backend_type = 'client backend' AND datname = current_database()
  FROM pg_stat_activity WHERE pid <> pg_backend_pid()`

func readCPU(ctx context.Context, conn *pgx.Conn, s *snapshot) error {
	rows, err := conn.Query(ctx, activitySQL)
	if err != nil {
		return fmt.Errorf("activity: %w", err)
	}
	s.backend, s.other = map[int]int64{}, map[int]int64{}
	var pid int32
	var ours bool
	_, err = pgx.ForEachRow(rows, []any{&pid, &ours}, func() error {
		if ours {
			s.backend[int(pid)] = procs.ProcessTicks(int(pid))
		} else {
			s.other[int(pid)] = procs.ProcessTicks(int(pid))
		}
		return nil
	})
	return err
}

// run profiles one run of the api against db: warm-up, ANALYZE, reset of
// pg_stat_statements, the measured charges, and what they cost.
func (s *stack) run(ctx context.Context, db *database, tag string, pprof bool) (*Result, error) {
	apiAddr, err := procs.FreeAddr()
	if err != nil {
		return nil, err
	}
	pprofAddr, err := procs.FreeAddr()
	if err != nil {
		return nil, err
	}
	api := procs.New("api", filepath.Join(s.bin, "api"), map[string]string{
		"DATABASE_URL": db.url, "API_ADDR": apiAddr, "PSP_URL": s.pspURL, "PPROF_ADDR": pprofAddr,
	}, "serve")
	if err := api.Start(); err != nil {
		return nil, err
	}
	stopped := false
	stopAPI := func() {
		if !stopped {
			stopped = true
			api.Stop(30 * time.Second)
		}
	}
	defer stopAPI()
	base := "http://" + apiAddr
	if err := procs.WaitUp(ctx, base+"/healthz"); err != nil {
		return nil, fmt.Errorf("api: %w: %s", err, procs.LastLines(api.LogText(), 5))
	}
	conn, err := pgx.Connect(ctx, db.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	if ok, failed, _ := drive(ctx, base, db.apiKey, tag+"-warm", s.cfg.Warmup, s.cfg.Clients); failed > 0 {
		return nil, fmt.Errorf("warm-up: %d of %d charges failed: %s", failed, ok+failed, procs.LastLines(api.LogText(), 5))
	}
	// A backend flushes its table and WAL counters when it goes idle, but
	// not more often than once a second; what it holds back it flushes
	// after 10 s idle (PGSTAT_IDLE_INTERVAL). Without the wait the
	// warm-up's last writes would be counted as the run's.
	time.Sleep(11 * time.Second)
	for _, q := range []string{"ANALYZE", "CHECKPOINT", "SELECT pg_stat_statements_reset()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	var before, after snapshot
	if before.tables, err = readTables(ctx, conn); err != nil {
		return nil, err
	}
	if before.wal, before.lsn, err = readWAL(ctx, conn); err != nil {
		return nil, err
	}
	if err := readCPU(ctx, conn, &before); err != nil {
		return nil, err
	}
	before.api = procs.ProcessTicks(api.Pid())

	profPath := filepath.Join(s.tmp, "api-"+db.name+"-"+tag+".pprof")
	profDone := make(chan error, 1)
	if pprof && s.cfg.PprofSeconds > 0 {
		go func() { profDone <- fetchProfile(ctx, pprofAddr, s.cfg.PprofSeconds, profPath) }()
	} else {
		profDone <- nil
		pprof = false
	}
	ok, failed, elapsed := drive(ctx, base, db.apiKey, tag, s.cfg.Charges, s.cfg.Clients)
	if err := readCPU(ctx, conn, &after); err != nil {
		return nil, err
	}
	after.api = procs.ProcessTicks(api.Pid())
	perr := <-profDone
	// The api's backends flush their table and WAL statistics as they
	// exit.
	stopAPI()
	time.Sleep(500 * time.Millisecond)
	if after.tables, err = readTables(ctx, conn); err != nil {
		return nil, err
	}
	if after.wal, after.lsn, err = readWAL(ctx, conn); err != nil {
		return nil, err
	}
	stmts, err := readStatements(ctx, conn)
	if err != nil {
		return nil, err
	}
	res := &Result{Charges: ok, Failed: failed, Clients: s.cfg.Clients, Seconds: elapsed.Seconds()}
	if ok == 0 {
		return nil, fmt.Errorf("no charge succeeded: %s", procs.LastLines(api.LogText(), 5))
	}
	res.fill(stmts, tableDeltas(before.tables, after.tables), before, after)
	var lsnBytes int64
	if err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, after.lsn, before.lsn).Scan(&lsnBytes); err != nil {
		return nil, err
	}
	res.WAL.LSNBytes = float64(lsnBytes) / float64(ok)
	if counts, err := waldump(ctx, s.cluster.BinDir(), s.cluster.DataDir(), before.lsn, after.lsn); err != nil {
		res.WaldumpError = err.Error()
	} else {
		names, err := readIndexNames(ctx, conn)
		if err != nil {
			return nil, err
		}
		res.indexes(indexDeltas(counts, names))
	}
	if pprof {
		if perr != nil {
			res.PprofError = perr.Error()
		} else if res.APITop, err = topFuncs(ctx, filepath.Join(s.bin, "api"), profPath, 25, true); err != nil {
			res.PprofError = err.Error()
		} else if res.APIFlat, err = topFuncs(ctx, filepath.Join(s.bin, "api"), profPath, 15, false); err != nil {
			res.PprofError = err.Error()
		}
	}
	return res, nil
}
