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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// bareServer serves both baselines on one listener.
type bareServer struct {
	pool *pgxpool.Pool
	psp  string
	hc   *http.Client
	srv  *http.Server
	addr string
}

// startBare creates the table and serves the baselines on a free port,
// in this process. pspURL is the mock PSP's base URL.
func startBare(ctx context.Context, dbURL, pspURL string) (*bareServer, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, bareSchema); err != nil {
		pool.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return nil, err
	}
	b := &bareServer{
		pool: pool, psp: pspURL, addr: ln.Addr().String(),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /new/v1/charges", b.handleNew)
	mux.HandleFunc("POST /replay/v1/charges", b.handleReplay)
	b.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go b.srv.Serve(ln) //nolint:errcheck // ErrServerClosed at stop
	return b, nil
}

// NewURL and ReplayURL are the bases the load generator appends
// /v1/charges to.
func (b *bareServer) NewURL() string    { return "http://" + b.addr + "/new" }
func (b *bareServer) ReplayURL() string { return "http://" + b.addr + "/replay" }

func (b *bareServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.srv.Shutdown(ctx)
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
