package profile

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/tools/procs"
)

// Instruction counts: the database's CPU per request without this
// machine's noise. The cluster's server runs under valgrind's callgrind,
// which counts every instruction each backend executes and writes the
// count when the backend exits. A run starts the api, sends a warm-up and
// then n requests from one client, and stops the api: its backends exit,
// and the run's count is the sum over the files they wrote. Everything a
// run pays once (connecting, the catalog caches, the warm-up, the api's
// start) is the same in a short and a long run, so the cost of one request
// is the slope between them: (long − short) ÷ (nLong − nShort).

// CallgrindConfig says what to count.
type CallgrindConfig struct {
	// Short and Long are the requests of the two runs whose difference is
	// measured. Defaults 50 and 250.
	Short, Long int
	// Warmup is the new charges every run sends first (the replays replay
	// them). Default 20. (Config.Warmup charges, at Config.Clients, seed
	// each database before the server counts, and are analyzed.)
	Warmup int
	// BinB, if set, holds the api of variant B (code A/B): variant A runs
	// Config.BinDir's, both on the latest schema.
	BinB string
	// Functions is how many functions the report lists by their
	// inclusive instructions per request. Default 30; negative: none.
	Functions int
	// Replays counts replays too (POST again of a warm-up key), and
	// NoCharges only them.
	Replays, NoCharges bool
	// Clients is how many clients send the counted requests at once
	// (default 1). With more, concurrent requests share batches.
	Clients int
	// BatchAB counts the api with BATCH=false (A) against BATCH=true (B),
	// both the latest binary and schema.
	BatchAB bool
	// Keep, if set, is a directory that receives the counted backends'
	// files of every long run (<variant>-<round>-<kind>-cg.<pid>), for
	// callgrind_annotate.
	Keep string
}

func (c *CallgrindConfig) defaults() {
	c.Short = cmp.Or(c.Short, 50)
	c.Long = cmp.Or(c.Long, 250)
	c.Warmup = cmp.Or(c.Warmup, 20)
	c.Functions = cmp.Or(c.Functions, 30)
	c.Clients = cmp.Or(c.Clients, 1)
}

// Count is one variant's instructions per request in one round.
type Count struct {
	Variant string `json:"variant"`
	Round   int    `json:"round"`
	// PerCharge and PerReplay are the backends' instructions per new
	// charge and per replay (0: not measured).
	PerCharge float64 `json:"instructions_per_charge"`
	PerReplay float64 `json:"instructions_per_replay,omitempty"`
	// ChargeFunctions and ReplayFunctions are the inclusive instructions
	// per request of the costliest functions (callgrind_annotate
	// --inclusive=yes), summed over the backends.
	ChargeFunctions map[string]float64 `json:"charge_functions,omitempty"`
	ReplayFunctions map[string]float64 `json:"replay_functions,omitempty"`
}

// callgrindSettings are the cluster's: those of the profile without
// pg_stat_statements, whose hooks would count as the statements' own, and
// nothing that starts a process of its own in a run.
var callgrindSettings = map[string]string{
	"full_page_writes":                "on",
	"autovacuum":                      "off",
	"max_wal_size":                    "'4GB'",
	"jit":                             "off",
	"max_parallel_workers_per_gather": "0",
}

// variant is what one side of an A/B runs: an api binary on a database.
type variant struct {
	label string
	bin   string
	db    *database
	env   map[string]string // the api's, besides the stack's
}

// RunCallgrind counts instructions per request for one variant, or for A
// and B alternating Config.Rounds times (Config.AB: a schema; cc.BinB: a
// binary).
func RunCallgrind(ctx context.Context, cfg Config, cc CallgrindConfig) ([]Count, error) {
	cfg.defaults()
	cc.defaults()
	if _, err := exec.LookPath("valgrind"); err != nil {
		return nil, errors.New("valgrind is not installed (apt-get install valgrind)")
	}
	s := &stack{cfg: cfg, log: func(f string, a ...any) { fmt.Fprintf(cfg.Progress, f+"\n", a...) }}
	bin, cleanup, err := procs.Binaries(ctx, cfg.BinDir, "", cfg.Progress)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	s.bin = bin
	if s.tmp, err = os.MkdirTemp("", "phasepay-callgrind-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(s.tmp)
	// The server runs as postgres when this runs as root: it must reach
	// the wrapper and write its counts.
	if err := os.Chmod(s.tmp, 0o755); err != nil {
		return nil, err
	}
	out := filepath.Join(s.tmp, "counts")
	if err := os.Mkdir(out, 0o777); err != nil {
		return nil, err
	}
	if err := os.Chmod(out, 0o777); err != nil {
		return nil, err
	}
	on := filepath.Join(s.tmp, "on")
	wrapped, err := valgrindBinDir(filepath.Join(s.tmp, "pgbin"), on, out)
	if err != nil {
		return nil, err
	}
	s.log("starting a throw-away cluster")
	if s.cluster, err = pgcluster.New(ctx, pgcluster.Config{BinDir: wrapped, Settings: callgrindSettings, StartTimeout: 5 * time.Minute}); err != nil {
		return nil, err
	}
	defer s.cluster.Close()
	pspAddr, err := procs.FreeAddr()
	if err != nil {
		return nil, err
	}
	psp := procs.New("mockpsp", filepath.Join(bin, "mockpsp"), map[string]string{"MOCKPSP_ADDR": pspAddr})
	if err := psp.Start(); err != nil {
		return nil, err
	}
	defer psp.Stop(10e9)
	s.pspURL = "http://" + pspAddr
	if err := procs.WaitUp(ctx, s.pspURL+"/_admin/authorizations"); err != nil {
		return nil, fmt.Errorf("mockpsp: %w", err)
	}

	variants := []*variant{{label: "latest", bin: bin}}
	versions := []int64{0}
	switch {
	case cc.BatchAB:
		variants = []*variant{{label: "A (BATCH=false)", bin: bin, env: map[string]string{"BATCH": "false"}},
			{label: "B (BATCH=true)", bin: bin, env: map[string]string{"BATCH": "true"}}}
		versions = []int64{0, 0}
	case cc.BinB != "":
		variants = []*variant{{label: "A (" + bin + ")", bin: bin}, {label: "B (" + cc.BinB + ")", bin: cc.BinB}}
		versions = []int64{0, 0}
	case cfg.AB != 0:
		variants = []*variant{{label: "A (up to " + strconv.FormatInt(cfg.AB, 10) + ")", bin: bin}, {label: "B (latest)", bin: bin}}
		versions = []int64{cfg.AB, 0}
	}
	for i, v := range variants {
		if v.db, err = s.newDatabaseWith(ctx, fmt.Sprintf("callgrind_%d", i), versions[i], false); err != nil {
			return nil, err
		}
		if err := s.seed(ctx, v); err != nil {
			return nil, fmt.Errorf("%s: seed: %w", v.label, err)
		}
	}

	// From here on the server counts.
	s.log("restarting the cluster under callgrind")
	if err := s.cluster.StopFast(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(on, nil, 0o644); err != nil {
		return nil, err
	}
	if err := s.cluster.Start(ctx); err != nil {
		return nil, err
	}

	rounds := 1
	if len(variants) > 1 {
		rounds = cfg.Rounds
	}
	var counts []Count
	for r := range rounds {
		for vi, v := range variants {
			c := Count{Variant: v.label, Round: r + 1}
			var kinds []string
			if !cc.NoCharges {
				kinds = append(kinds, "charge")
			}
			if cc.Replays || cc.NoCharges {
				kinds = append(kinds, "replay")
			}
			for _, kind := range kinds {
				var total [2]float64
				var fns [2]map[string]float64
				for i, n := range []int{cc.Short, cc.Long} {
					tag := fmt.Sprintf("v%d-r%d-%s-%d", vi, r+1, kind, n)
					s.log("round %d, %s: %d %ss", r+1, v.label, n, kind)
					if total[i], fns[i], err = s.countRun(ctx, out, v, kind, n, cc, tag); err != nil {
						return nil, fmt.Errorf("%s, round %d, %d %ss: %w", v.label, r+1, n, kind, err)
					}
				}
				per := (total[1] - total[0]) / float64(cc.Long-cc.Short)
				perFn := slope(fns[0], fns[1], cc.Long-cc.Short)
				if kind == "charge" {
					c.PerCharge, c.ChargeFunctions = per, perFn
				} else {
					c.PerReplay, c.ReplayFunctions = per, perFn
				}
				s.log("  %.0f instructions per %s", per, kind)
			}
			counts = append(counts, c)
		}
	}
	return counts, nil
}

// countRun runs the api of v for one warm-up and n requests of kind, and
// returns the instructions its backends executed in all, and by function.
func (s *stack) countRun(ctx context.Context, out string, v *variant, kind string, n int, cc CallgrindConfig, tag string) (float64, map[string]float64, error) {
	before, err := countFiles(out)
	if err != nil {
		return 0, nil, err
	}
	// The server's own processes (checkpointer, WAL writer, …) live on.
	helpers, err := serverChildren(s.cluster.DataDir())
	if err != nil {
		return 0, nil, err
	}
	apiAddr, err := procs.FreeAddr()
	if err != nil {
		return 0, nil, err
	}
	// Its pool opens all its connections at its start, so that a longer
	// run opens no more of them (each a backend start, millions of
	// instructions).
	// Under valgrind a statement runs some fifty times slower, and with
	// several clients waits behind others: the timeouts and the lease are
	// raised so that none of the counted requests fails on them.
	env := map[string]string{
		"DATABASE_URL": v.db.url + "&pool_min_conns=4&pool_max_conns=4&statement_timeout=120000&lock_timeout=120000",
		"API_ADDR":     apiAddr, "PSP_URL": s.pspURL, "LEASE": "10m",
	}
	maps.Copy(env, v.env)
	api := procs.New("api", filepath.Join(v.bin, "api"), env, "serve")
	if err := api.Start(); err != nil {
		return 0, nil, err
	}
	base := "http://" + apiAddr
	failed := func(what string, failed int) error {
		// The api's lines about what failed, else its last ones.
		var bad []string
		for _, line := range strings.Split(api.LogText(), "\n") {
			if strings.Contains(line, `"msg":"request failed"`) || strings.Contains(line, `"level":"ERROR"`) {
				bad = append(bad, line)
			}
		}
		if len(bad) == 0 {
			return fmt.Errorf("%s: %d failed: %s", what, failed, procs.LastLines(api.LogText(), 5))
		}
		return fmt.Errorf("%s: %d failed: %s", what, failed, strings.Join(bad[:min(len(bad), 5)], " | "))
	}
	if err := waitUpSlow(ctx, base+"/healthz"); err != nil {
		api.Stop(30 * time.Second)
		return 0, nil, fmt.Errorf("api: %w: %s", err, procs.LastLines(api.LogText(), 5))
	}
	// With several clients the warm-up sends from as many, so that every
	// connection has prepared and planned what the counted requests run
	// (a batch's forms among them) in the short run as in the long.
	warm := cc.Warmup
	if cc.Clients > 1 {
		warm = max(warm, 8*cc.Clients)
	}
	if _, bad, _ := drive(ctx, base, v.db.apiKey, tag+"-warm", warm, cc.Clients); bad > 0 {
		api.Stop(30 * time.Second)
		return 0, nil, failed("warm-up", bad)
	}
	var bad int
	if kind == "charge" {
		_, bad, _ = drive(ctx, base, v.db.apiKey, tag, n, cc.Clients)
	} else {
		bad = replay(ctx, base, v.db.apiKey, tag+"-warm", cc.Warmup, n)
	}
	api.Stop(30 * time.Second)
	if bad > 0 {
		return 0, nil, failed(kind+"s", bad)
	}
	// The api's backends exit once it closed its connections, and write
	// their counts as they exit: the run is over when every process the
	// server started since its start has exited (pg_stat_activity drops a
	// backend before it exits, and its count is written last).
	files, err := waitRunOver(ctx, out, before, s.cluster.DataDir(), helpers)
	if err != nil {
		return 0, nil, err
	}
	var total float64
	fns := map[string]float64{}
	defer func() { s.log("  %d processes, %.0f instructions", len(files), total) }()
	for _, f := range files {
		ir, backend, err := fileTotal(f)
		if err != nil {
			return 0, nil, err
		}
		if !backend {
			continue
		}
		if cc.Keep != "" && n == cc.Long {
			b, err := os.ReadFile(f)
			if err == nil {
				err = os.WriteFile(filepath.Join(cc.Keep, tag+"-"+filepath.Base(f)), b, 0o644)
			}
			if err != nil {
				return 0, nil, err
			}
		}
		total += ir
		if os.Getenv("CALLGRIND_DEBUG") != "" {
			s.log("    %s: %.0f", filepath.Base(f), ir)
		}
		if cc.Functions > 0 {
			if err := addFunctions(ctx, f, fns); err != nil {
				return 0, nil, err
			}
		}
	}
	return total, fns, nil
}

// seed sends Config.Warmup new charges to v's database and analyzes it,
// before the server counts: every run plans its statements with these
// statistics, as a server with autovacuum would (make profile analyzes
// after its warm-up likewise).
func (s *stack) seed(ctx context.Context, v *variant) error {
	apiAddr, err := procs.FreeAddr()
	if err != nil {
		return err
	}
	api := procs.New("api", filepath.Join(v.bin, "api"), map[string]string{
		"DATABASE_URL": v.db.url, "API_ADDR": apiAddr, "PSP_URL": s.pspURL,
	}, "serve")
	if err := api.Start(); err != nil {
		return err
	}
	defer api.Stop(30 * time.Second)
	base := "http://" + apiAddr
	if err := procs.WaitUp(ctx, base+"/healthz"); err != nil {
		return fmt.Errorf("api: %w: %s", err, procs.LastLines(api.LogText(), 5))
	}
	if _, bad, _ := drive(ctx, base, v.db.apiKey, "seed", s.cfg.Warmup, s.cfg.Clients); bad > 0 {
		return fmt.Errorf("%d charges failed: %s", bad, procs.LastLines(api.LogText(), 5))
	}
	conn, err := pgx.Connect(ctx, v.db.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "ANALYZE")
	return err
}

// replay sends n replays, cycling over the keys prefix-0 … prefix-(keys-1),
// from one client, and returns how many were not answered 201.
func replay(ctx context.Context, base, apiKey, prefix string, keys, n int) (failed int) {
	hc := newClient(1)
	for i := range n {
		if !post(ctx, hc, base, apiKey, fmt.Sprintf("%s-%d", prefix, i%keys)) {
			failed++
		}
	}
	return failed
}

// waitUpSlow is procs.WaitUp with room for an api whose database runs
// under valgrind.
func waitUpSlow(ctx context.Context, u string) error {
	var err error
	for range 6 {
		if err = procs.WaitUp(ctx, u); err == nil {
			return nil
		}
	}
	return err
}

// valgrindBinDir makes dir a PostgreSQL bin directory whose postgres runs
// the server under callgrind while the file on exists, writing each
// process's count to out/cg.<pid>. initdb and everything else are the
// real ones (initdb finds the real postgres beside its own target).
func valgrindBinDir(dir, on, out string) (string, error) {
	real := cmp.Or(os.Getenv("PGCLUSTER_BIN"), pgcluster.BinDirDefault)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Name() == "postgres" {
			continue
		}
		if err := os.Symlink(filepath.Join(real, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return "", err
		}
	}
	script := fmt.Sprintf(`#!/bin/sh
if [ -e %[1]q ] && [ "$1" = "-D" ]; then
	exec valgrind --tool=callgrind --zero-before=%[4]s --callgrind-out-file=%[2]q %[3]q "$@"
fi
exec %[3]q "$@"
`, on, filepath.Join(out, "cg.%p"), filepath.Join(real, "postgres"), zeroedAt)
	if err := os.WriteFile(filepath.Join(dir, "postgres"), []byte(script), 0o755); err != nil {
		return "", err
	}
	// The server's user must reach the wrapper.
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func countFiles(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.Name()] = true
	}
	return seen, nil
}

// serverChildren lists the pids of the server's processes: the children
// of the postmaster whose pid the data directory's postmaster.pid names
// (valgrind runs it in the process the wrapper started).
func serverChildren(dataDir string) (map[string]bool, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil, err
	}
	ppid, _, _ := strings.Cut(string(b), "\n")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[string]bool{}
	for _, e := range entries {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // not a process, or gone
		}
		// pid (comm) state ppid …; comm may hold spaces.
		_, rest, ok := strings.Cut(string(stat), ") ")
		if f := strings.Fields(rest); ok && len(f) > 1 && f[1] == strings.TrimSpace(ppid) {
			children[e.Name()] = true
		}
	}
	return children, nil
}

// waitRunOver waits until the server has no process but helpers, and
// returns the count files written since before.
func waitRunOver(ctx context.Context, dir string, before map[string]bool, dataDir string, helpers map[string]bool) ([]string, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		children, err := serverChildren(dataDir)
		if err != nil {
			return nil, err
		}
		over := true
		for pid := range children {
			if !helpers[pid] {
				over = false
			}
		}
		if over {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the server's backends do not exit")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	now, err := countFiles(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for name := range now {
		if !before[name] {
			files = append(files, filepath.Join(dir, name))
		}
	}
	slices.Sort(files)
	return files, nil
}

// fileTotal reads the instruction count a callgrind file sums up, and
// whether it is a backend's that reached its main loop: its count starts
// there (valgrindBinDir's --zero-before), so that what a backend costs to
// start, the same however many requests follow, is left out. Other files
// (the server's own processes, connections that never finished starting)
// are not the requests'.
func fileTotal(path string) (total float64, backend bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	return parseTotal(f)
}

// zeroedAt is the function whose entry zeroes a backend's count.
const zeroedAt = "BeginReportingGUCOptions"

func parseTotal(r io.Reader) (total float64, backend bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		// Its name is written once, where it first appears, as a
		// function or a callee (fn=(id) name, cfn=(id) name).
		if (strings.HasPrefix(line, "fn=") || strings.HasPrefix(line, "cfn=")) && strings.HasSuffix(line, " "+zeroedAt) {
			backend = true
		}
		for _, p := range []string{"summary: ", "totals: "} {
			if v, ok := strings.CutPrefix(line, p); ok && !found {
				n, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
				if err != nil {
					return 0, false, fmt.Errorf("%q: %w", line, err)
				}
				total, found = n, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, false, err
	}
	if !found {
		return 0, false, errors.New("no summary line")
	}
	return total, backend, nil
}

// annotateLine is one function of callgrind_annotate's listing:
// "1,234 (12.3%)  file:function [object]".
var annotateLine = regexp.MustCompile(`^\s*([\d,]+) \([ \d.]+%\)\s+(?:\* )?(\S.*?)(?: \[.*\])?$`)

// addFunctions adds each function's inclusive count in the file to fns.
func addFunctions(ctx context.Context, path string, fns map[string]float64) error {
	out, err := exec.CommandContext(ctx, "callgrind_annotate", "--inclusive=yes", "--threshold=100", path).Output()
	if err != nil {
		return fmt.Errorf("callgrind_annotate: %w", err)
	}
	parseFunctions(bytes.NewReader(out), fns)
	return nil
}

func parseFunctions(r io.Reader, fns map[string]float64) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := annotateLine.FindStringSubmatch(sc.Text())
		if m == nil || strings.Contains(m[2], "PROGRAM TOTALS") {
			continue
		}
		n, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
		if err != nil {
			continue
		}
		name := m[2]
		if _, fn, ok := strings.Cut(name, ":"); ok {
			name = fn
		}
		// Unnamed (static) functions, the frames below the server's main
		// loop, and cycles ('2) say nothing of their own.
		if strings.HasPrefix(name, "0x") || strings.Contains(name, "'") || strings.HasPrefix(name, "(") ||
			slices.Contains([]string{"main", "PostmasterMain", "__libc_start_main@@GLIBC_2.34"}, name) {
			continue
		}
		fns[name] += n
	}
}

// slope is (long − short) ÷ n per function.
func slope(short, long map[string]float64, n int) map[string]float64 {
	out := map[string]float64{}
	for fn, v := range long {
		if d := (v - short[fn]) / float64(n); d > 0 {
			out[fn] = d
		}
	}
	return out
}

// CallgrindMarkdown writes the counts, B ÷ A of their means when there
// are two variants, and the functions whose inclusive count per request
// changed most (or the costliest, for one variant).
func CallgrindMarkdown(w io.Writer, counts []Count, functions int) {
	fmt.Fprintf(w, "| variant | round | instructions per new charge | per replay |\n|---|---:|---:|---:|\n")
	for _, c := range counts {
		fmt.Fprintf(w, "| %s | %d | %.0f | %.0f |\n", c.Variant, c.Round, c.PerCharge, c.PerReplay)
	}
	var labels []string
	for _, c := range counts {
		if !slices.Contains(labels, c.Variant) {
			labels = append(labels, c.Variant)
		}
	}
	mean := func(label string, f func(Count) float64) float64 {
		var sum float64
		var n int
		for _, c := range counts {
			if c.Variant == label {
				sum += f(c)
				n++
			}
		}
		return sum / float64(max(n, 1))
	}
	meanFns := func(label string, f func(Count) map[string]float64) map[string]float64 {
		out := map[string]float64{}
		var n float64
		for _, c := range counts {
			if c.Variant == label {
				for fn, v := range f(c) {
					out[fn] += v
				}
				n++
			}
		}
		for fn := range out {
			out[fn] /= max(n, 1)
		}
		return out
	}
	perCharge := func(c Count) float64 { return c.PerCharge }
	perReplay := func(c Count) float64 { return c.PerReplay }
	if len(labels) == 2 {
		fmt.Fprintf(w, "\nB ÷ A of the means: new charge %.3f", mean(labels[1], perCharge)/mean(labels[0], perCharge))
		if a := mean(labels[0], perReplay); a > 0 {
			fmt.Fprintf(w, ", replay %.3f", mean(labels[1], perReplay)/a)
		}
		fmt.Fprintln(w)
	}
	if functions <= 0 {
		return
	}
	for _, k := range []struct {
		name string
		f    func(Count) map[string]float64
	}{{"new charge", func(c Count) map[string]float64 { return c.ChargeFunctions }}, {"replay", func(c Count) map[string]float64 { return c.ReplayFunctions }}} {
		a := meanFns(labels[0], k.f)
		if len(a) == 0 {
			continue
		}
		b := a
		if len(labels) == 2 {
			b = meanFns(labels[1], k.f)
		}
		names := map[string]bool{}
		for fn := range a {
			names[fn] = true
		}
		for fn := range b {
			names[fn] = true
		}
		list := make([]string, 0, len(names))
		for fn := range names {
			list = append(list, fn)
		}
		key := func(fn string) float64 {
			if len(labels) == 2 {
				d := b[fn] - a[fn]
				return max(d, -d)
			}
			return a[fn]
		}
		slices.SortFunc(list, func(x, y string) int { return cmp.Compare(key(y), key(x)) })
		list = list[:min(functions, len(list))]
		if len(labels) == 2 {
			fmt.Fprintf(w, "\n| function (%s, inclusive) | A per request | B per request | B − A |\n|---|---:|---:|---:|\n", k.name)
			for _, fn := range list {
				fmt.Fprintf(w, "| `%s` | %.0f | %.0f | %+.0f |\n", fn, a[fn], b[fn], b[fn]-a[fn])
			}
		} else {
			fmt.Fprintf(w, "\n| function (%s, inclusive) | per request |\n|---|---:|\n", k.name)
			for _, fn := range list {
				fmt.Fprintf(w, "| `%s` | %.0f |\n", fn, a[fn])
			}
		}
	}
}
