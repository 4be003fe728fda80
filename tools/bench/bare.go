package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/tools/procs"
)

// The bare baselines: what an HTTP service cannot avoid doing for a new
// charge and for a replay, written as plainly as possible and driven by the
// same load generator as phasepay. pgbench alone is no limit an HTTP service
// can reach: it has no HTTP, no JSON and no PSP call.
//
//   - bare-new (POST /new/v1/charges): one single-statement INSERT commit,
//     one call to the mock PSP process, one single-statement UPDATE commit
//     that stores the answer, and the JSON answer.
//   - bare-replay (POST /replay/v1/charges): one primary-key read of a row
//     bare-new wrote, whose stored bytes are the answer.
//
// It keeps no idempotency beyond the primary key (a duplicate is a 409), no
// leases, no fencing, no telemetry: it is the floor, not a design.

// bareSchema is the baselines' table, in the benchmark's database.
const bareSchema = `
CREATE TABLE IF NOT EXISTS bare_charges (
    key        text PRIMARY KEY,
    request    bytea NOT NULL,
    status     text NOT NULL,
    response   bytea,
    created_at timestamptz NOT NULL DEFAULT now()
)`

const (
	bareInsertSQL = `INSERT INTO bare_charges (key, request, status) VALUES ($1, $2, 'pending')`
	bareUpdateSQL = `UPDATE bare_charges SET status = $2, response = $3 WHERE key = $1`
	bareReplaySQL = `SELECT response FROM bare_charges WHERE key = $1`
)

// The baselines run as a process of their own (`bench bare`, ServeBare),
// started and stopped like the api (startBare): an HTTP service cannot
// avoid being a process apart from its clients. Served from inside the load
// generator's process, they woke their handlers by goroutine hand-offs in
// the loader's own scheduler instead of across processes, and shared its
// CPU accounting: a floor no service could reach. On this 2-core VM that
// made bare-replay's p50 at 1 client 1.7-2.1x lower and its throughput
// 1.2-1.6x higher than in a process of its own (two A/Bs of 3 alternating
// runs a side); bare-new's difference was within the disk's noise.

// Environment of `bench bare` (BareConfigFromEnv); startBare sets them.
const (
	bareAddrEnv = "BARE_ADDR"
	bareDBEnv   = "DATABASE_URL"
	barePSPEnv  = "PSP_URL"
)

// bareHealthz answers 200 once the table exists and the port listens:
// what startServer waits for.
const bareHealthz = "/healthz"

// BareConfig configures the bare baselines' process (ServeBare).
type BareConfig struct {
	// Addr is the host:port to listen on (BARE_ADDR).
	Addr string
	// DatabaseURL is the database whose bare_charges table the baselines
	// create and use (DATABASE_URL).
	DatabaseURL string
	// PSPURL is the mock PSP's base URL (PSP_URL).
	PSPURL string
}

// BareConfigFromEnv reads BARE_ADDR, DATABASE_URL and PSP_URL, all
// required: make bench sets them when it starts the process.
func BareConfigFromEnv(getenv func(string) string) (BareConfig, error) {
	cfg := BareConfig{Addr: getenv(bareAddrEnv), DatabaseURL: getenv(bareDBEnv), PSPURL: getenv(barePSPEnv)}
	var missing []string
	for _, v := range []struct{ name, val string }{{bareAddrEnv, cfg.Addr}, {bareDBEnv, cfg.DatabaseURL}, {barePSPEnv, cfg.PSPURL}} {
		if v.val == "" {
			missing = append(missing, v.name)
		}
	}
	if len(missing) > 0 {
		return cfg, fmt.Errorf("%s not set (make bench sets them when it starts the bare baselines)", strings.Join(missing, ", "))
	}
	return cfg, nil
}

// ServeBare creates the table and serves the baselines on cfg.Addr until
// ctx ends (SIGTERM, from startBare's stop), then shuts down and closes
// its connections. It is the whole of `bench bare`.
func ServeBare(ctx context.Context, cfg BareConfig) error {
	b, err := newBare(ctx, cfg.DatabaseURL, cfg.PSPURL)
	if err != nil {
		return err
	}
	defer b.close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	srv := &http.Server{Handler: b.handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve on %s: %w", cfg.Addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}

// bareProcess is a running `bench bare` (startBare).
type bareProcess struct {
	*server
	addr string
}

// startBare starts the bare baselines as a process of their own
// (Config.BareCmd), on dbURL and calling the mock PSP at pspURL, and waits
// until it answers GET /healthz.
func (e *env) startBare(ctx context.Context, dbURL, pspURL string) (*bareProcess, error) {
	if len(e.cfg.BareCmd) == 0 {
		return nil, errors.New("Config.BareCmd is not set: nothing can serve the bare baselines")
	}
	addr, err := procs.FreeAddr()
	if err != nil {
		return nil, err
	}
	srv, err := startServer(ctx, e.cfg.BareCmd[0], map[string]string{bareAddrEnv: addr, bareDBEnv: dbURL, barePSPEnv: pspURL},
		"http://"+addr+bareHealthz, e.cfg.BareCmd[1:]...)
	if err != nil {
		return nil, fmt.Errorf("start the bare baselines: %w", err)
	}
	return &bareProcess{server: srv, addr: addr}, nil
}

// NewURL and ReplayURL are the bases the load generator appends
// /v1/charges to.
func (b *bareProcess) NewURL() string    { return "http://" + b.addr + "/new" }
func (b *bareProcess) ReplayURL() string { return "http://" + b.addr + "/replay" }

// bareServer serves both baselines on one listener.
type bareServer struct {
	pool *pgxpool.Pool
	psp  string
	hc   *http.Client
}

// newBare connects to dbURL and creates the table. pspURL is the mock
// PSP's base URL.
func newBare(ctx context.Context, dbURL, pspURL string) (*bareServer, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := pool.Exec(ctx, bareSchema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("create bare_charges: %w", err)
	}
	return &bareServer{
		pool: pool, psp: pspURL,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second},
	}, nil
}

func (b *bareServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /new/v1/charges", b.handleNew)
	mux.HandleFunc("POST /replay/v1/charges", b.handleReplay)
	mux.HandleFunc("GET "+bareHealthz, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

func (b *bareServer) close() {
	b.hc.CloseIdleConnections()
	b.pool.Close()
}

type bareRequest struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
}

type bareAuthorization struct {
	ID          string  `json:"id"`
	Status      string  `json:"status"`
	DeclineCode *string `json:"decline_code"`
}

type bareCharge struct {
	ID           string  `json:"id"`
	Amount       int64   `json:"amount"`
	Currency     string  `json:"currency"`
	Status       string  `json:"status"`
	PSPReference string  `json:"psp_reference"`
	DeclineCode  *string `json:"decline_code"`
}

func (b *bareServer) handleNew(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	var req bareRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || key == "" || req.Amount <= 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if _, err := b.pool.Exec(ctx, bareInsertSQL, key, body); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	id := "ch_" + key
	auth, err := b.authorize(ctx, key, id, req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	ch := bareCharge{ID: id, Amount: req.Amount, Currency: req.Currency, Status: auth.Status, PSPReference: auth.ID, DeclineCode: auth.DeclineCode}
	resp, _ := json.Marshal(ch)
	if _, err := b.pool.Exec(ctx, bareUpdateSQL, key, auth.Status, resp); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(resp)
}

func (b *bareServer) authorize(ctx context.Context, key, id string, req bareRequest) (bareAuthorization, error) {
	body, _ := json.Marshal(map[string]any{
		"amount": req.Amount, "currency": req.Currency, "payment_method": req.PaymentMethod, "reference": id,
	})
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, b.psp+"/v1/authorizations", bytes.NewReader(body))
	if err != nil {
		return bareAuthorization{}, err
	}
	hr.Header.Set("Idempotency-Key", key)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := b.hc.Do(hr)
	if err != nil {
		return bareAuthorization{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return bareAuthorization{}, fmt.Errorf("psp: %s", resp.Status)
	}
	var a bareAuthorization
	err = json.NewDecoder(resp.Body).Decode(&a)
	return a, err
}

func (b *bareServer) handleReplay(w http.ResponseWriter, r *http.Request) {
	var resp []byte
	err := b.pool.QueryRow(r.Context(), bareReplaySQL, r.Header.Get("Idempotency-Key")).Scan(&resp)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && resp == nil) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(resp)
}
