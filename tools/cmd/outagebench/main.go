// Command outagebench measures how many requests each idempotency key sends
// to the PSP during a PSP outage: it starts a mock PSP that answers every
// request 503 (error_rate 1), one api and one reaper (built from any
// version of phasepay, given in -bin), sends -keys charges at once (each
// answered 503 and left to the reaper's schedule), brings the PSP back
// after -outage, waits until every key is done, and counts the PSP
// requests per key: from the mock's ledger (attempts per key, in every
// version of the mock) and, when the mock has it, its request log
// (lookups by reference too). Not part of make test: docs/operations.md
// (PSP outage) shows its numbers for the code before and after the retry
// schedule.
//
//	outagebench -bin DIR [-keys 50] [-outage 60s] [-admin-url URL]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/tools/procs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

func run(args []string, stdout io.Writer) int {
	fs := flag.NewFlagSet("outagebench", flag.ContinueOnError)
	bin := fs.String("bin", "", "directory with api, reaper and mockpsp (required)")
	keys := fs.Int("keys", 50, "charges sent at the start of the outage")
	outage := fs.Duration("outage", 60*time.Second, "how long the PSP answers 503 to everything")
	wait := fs.Duration("wait", 10*time.Minute, "how long to wait, after the outage, for every key to be done")
	admin := fs.String("admin-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL URL to create the run's database on")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fmt.Fprintln(stdout, "Usage: outagebench -bin DIR [flags]\n\nCounts the PSP requests per idempotency key during a PSP outage.\n\nFlags:")
		fs.PrintDefaults()
		return 0
	} else if err != nil || *bin == "" {
		fmt.Fprintln(os.Stderr, "outagebench: -bin DIR is required (and flags must parse):", err)
		return 2
	}
	res, err := measure(context.Background(), *bin, *admin, *keys, *outage, *wait)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outagebench:", err)
		return 1
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	fmt.Fprintln(stdout, string(b))
	return 0
}

// result is what a run measured.
type result struct {
	Keys          int     `json:"keys"`
	Outage        string  `json:"outage"`
	DoneAfterBack string  `json:"all_done_after_psp_back"`
	SendsPerKey   []int   `json:"sends_per_key_sorted"` // POSTs with each key (mock ledger attempts)
	SendsMin      int     `json:"sends_min"`
	SendsMedian   int     `json:"sends_median"`
	SendsMax      int     `json:"sends_max"`
	SendsMean     float64 `json:"sends_mean"`
	Lookups       int     `json:"lookups"` // -1: the mock has no request log
	RequestsTotal int     `json:"psp_requests_total"`
	DuringOutage  int     `json:"psp_requests_during_outage"` // -1: no request log
}

func measure(ctx context.Context, bin, admin string, n int, outage, wait time.Duration) (*result, error) {
	dbURL, drop, err := createDatabase(ctx, admin)
	if err != nil {
		return nil, err
	}
	defer drop()
	exe := func(name string) string { return filepath.Join(bin, name) }
	env := map[string]string{"DATABASE_URL": dbURL}
	if _, err := procs.RunOnce(ctx, exe("api"), env, "migrate"); err != nil {
		return nil, err
	}
	apiKey, err := procs.RunOnce(ctx, exe("api"), env, "keys", "create", "--tenant", "outage")
	if err != nil {
		return nil, err
	}
	pspAddr, err := procs.FreeAddr()
	if err != nil {
		return nil, err
	}
	apiAddr, err := procs.FreeAddr()
	if err != nil {
		return nil, err
	}
	pspURL := "http://" + pspAddr
	cmds := []*exec.Cmd{
		start(exe("mockpsp"), map[string]string{"MOCKPSP_ADDR": pspAddr, "MOCKPSP_ERROR_RATE": "1"}),
	}
	defer func() {
		for _, p := range cmds {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	if err := procs.WaitUp(ctx, pspURL+"/_admin/authorizations"); err != nil {
		return nil, fmt.Errorf("mockpsp: %w", err)
	}
	common := map[string]string{"DATABASE_URL": dbURL, "PSP_URL": pspURL}
	cmds = append(cmds, start(exe("api"), merge(common, map[string]string{"API_ADDR": apiAddr}), "serve"))
	cmds = append(cmds, start(exe("reaper"), common))
	if err := procs.WaitUp(ctx, "http://"+apiAddr+"/healthz"); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}

	began := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"amount":%d,"currency":"usd","payment_method":"pm_card_visa"}`, 1000+i)
			req, _ := http.NewRequest(http.MethodPost, "http://"+apiAddr+"/v1/charges", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			req.Header.Set("Idempotency-Key", fmt.Sprintf("outage-%03d", i))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Until(began.Add(outage)))
	var before struct{ Data []json.RawMessage }
	logged := getJSON(pspURL+"/_admin/requests", &before) == nil
	if err := put(pspURL+"/_admin/faults", `{}`); err != nil {
		return nil, err
	}
	back := time.Now()

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	for {
		var done int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state = 'done'`).Scan(&done); err != nil {
			return nil, err
		}
		if done == n {
			break
		}
		if time.Since(back) > wait {
			return nil, fmt.Errorf("%d of %d keys done %s after the PSP came back", done, n, wait)
		}
		time.Sleep(200 * time.Millisecond)
	}
	res := &result{Keys: n, Outage: outage.String(), DoneAfterBack: time.Since(back).Truncate(100 * time.Millisecond).String(),
		Lookups: -1, DuringOutage: -1}

	var ledger struct {
		Data []struct {
			IdempotencyKey string `json:"idempotency_key"`
			Attempts       int    `json:"attempts"`
		}
	}
	if err := getJSON(pspURL+"/_admin/authorizations", &ledger); err != nil {
		return nil, err
	}
	for _, a := range ledger.Data {
		res.SendsPerKey = append(res.SendsPerKey, a.Attempts)
		res.RequestsTotal += a.Attempts
	}
	if len(res.SendsPerKey) != n {
		return nil, fmt.Errorf("the PSP holds %d authorizations for %d keys", len(res.SendsPerKey), n)
	}
	slices.Sort(res.SendsPerKey)
	res.SendsMin, res.SendsMax = res.SendsPerKey[0], res.SendsPerKey[n-1]
	res.SendsMedian = res.SendsPerKey[n/2]
	res.SendsMean = float64(res.RequestsTotal) / float64(n)
	if logged {
		var log struct {
			Data []struct{ Method, Path string }
		}
		if err := getJSON(pspURL+"/_admin/requests", &log); err != nil {
			return nil, err
		}
		res.RequestsTotal, res.Lookups, res.DuringOutage = len(log.Data), 0, len(before.Data)
		for _, r := range log.Data {
			if r.Method == http.MethodGet {
				res.Lookups++
			}
		}
	}
	return res, nil
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func start(bin string, env map[string]string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "outagebench: start", bin, err)
		os.Exit(1)
	}
	return cmd
}

func getJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func put(u, body string) error {
	req, _ := http.NewRequest(http.MethodPut, u, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s: %s", u, resp.Status)
	}
	return nil
}

func createDatabase(ctx context.Context, admin string) (string, func(), error) {
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("admin database: %w", err)
	}
	defer c.Close(ctx)
	name := fmt.Sprintf("phasepay_outage_%d", time.Now().UnixNano()%1_000_000_000)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	return u.String(), func() {
		if c, err := pgx.Connect(context.Background(), admin); err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}, nil
}
