package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// The round trips and statements each request costs, counted on the wire.

// RoundTrips are database round trips counted on the wire (wireCounter),
// per request, at one client.
type RoundTrips struct {
	NewCharge float64 `json:"per_new_charge"`
	Replay    float64 `json:"per_replay"`
	// BareNew and BareReplay are the bare baselines', for comparison.
	BareNew    float64 `json:"bare_per_new"`
	BareReplay float64 `json:"bare_per_replay"`
	Requests   int     `json:"requests"`
	// Statements are the statements sent (Execute and Query messages),
	// counted on the same wire: what the server runs, however it travels.
	Statements Statements `json:"statements"`
}

// Statements per request, counted on the wire (see RoundTrips).
type Statements struct {
	NewCharge  float64 `json:"per_new_charge"`
	Replay     float64 `json:"per_replay"`
	BareNew    float64 `json:"bare_per_new"`
	BareReplay float64 `json:"bare_per_replay"`
}

// roundTrips counts, on the wire, the database round trips of n new
// charges sent one at a time and of n replays of them, for phasepay and
// for the bare baselines. Each server connects to PostgreSQL through a
// wireCounter of its own and is warmed up first (connections, prepared
// statements, the auth cache), so the count is the steady state.
func (e *env) roundTrips(ctx context.Context, res *Results) error {
	const n = 200
	host := pgHost(e.dbURL)
	// count returns round trips and statements per new charge and per
	// replay: {trips, statements} each.
	count := func(base string, w *wireCounter, prefix string) (perNew, perReplay [2]float64, err error) {
		warm := keyList{}
		load(ctx, e.hc, base, e.apiKey, 1, 300*time.Millisecond, http.StatusCreated, func(_, i int) request {
			return request{keyf("%s-warm-%d", prefix, i), []byte(visa)}
		}, warm.add)
		if len(warm.keys) == 0 {
			return perNew, perReplay, fmt.Errorf("%s: no warm-up request succeeded", prefix)
		}
		replayBase := base
		if prefix == "bare" {
			replayBase = base[:len(base)-len("/new")] + "/replay"
		}
		load(ctx, e.hc, replayBase, e.apiKey, 1, 200*time.Millisecond, http.StatusCreated, warm.picker(1), nil)
		var keys keyList
		t0, s0 := w.Trips(), w.Statements()
		for i := range n {
			r := request{keyf("%s-rt-%d", prefix, i), []byte(visa)}
			if code, err := e.send(ctx, base, r); err != nil || code != http.StatusCreated {
				return perNew, perReplay, fmt.Errorf("%s new charge: %d %v", prefix, code, err)
			}
			keys.add(r)
		}
		t1, s1 := w.Trips(), w.Statements()
		for _, k := range keys.keys {
			if code, err := e.send(ctx, replayBase, request{k, []byte(visa)}); err != nil || code != http.StatusCreated {
				return perNew, perReplay, fmt.Errorf("%s replay: %d %v", prefix, code, err)
			}
		}
		t2, s2 := w.Trips(), w.Statements()
		perNew = [2]float64{float64(t1-t0) / n, float64(s1-s0) / n}
		perReplay = [2]float64{float64(t2-t1) / n, float64(s2-s1) / n}
		return perNew, perReplay, nil
	}

	w, err := startWireCounter(host)
	if err != nil {
		return err
	}
	defer w.Close()
	viaURL, err := viaWireCounter(e.dbURL, w.Addr())
	if err != nil {
		return err
	}
	base, stop, err := e.startStackOn(ctx, viaURL, nil)
	if err != nil {
		return err
	}
	rt := RoundTrips{Requests: n}
	newc, replay, err := count(base, w, "phasepay")
	stop()
	if err != nil {
		return err
	}
	rt.NewCharge, rt.Statements.NewCharge = newc[0], newc[1]
	rt.Replay, rt.Statements.Replay = replay[0], replay[1]

	bw, err := startWireCounter(host)
	if err != nil {
		return err
	}
	defer bw.Close()
	bareURL, err := viaWireCounter(e.dbURL, bw.Addr())
	if err != nil {
		return err
	}
	pspURL, psp, err := e.startPSP(ctx)
	if err != nil {
		return err
	}
	defer psp.stop()
	bare, err := e.startBare(ctx, bareURL, pspURL)
	if err != nil {
		return err
	}
	defer bare.stop()
	bareNew, bareReplay, err := count(bare.NewURL(), bw, "bare")
	if err != nil {
		return err
	}
	rt.BareNew, rt.Statements.BareNew = bareNew[0], bareNew[1]
	rt.BareReplay, rt.Statements.BareReplay = bareReplay[0], bareReplay[1]
	res.RoundTrips = rt
	st := rt.Statements
	e.log("  per new charge %.2f, per replay %.2f (bare: %.2f, %.2f); statements %.2f and %.2f (bare: %.2f, %.2f)",
		rt.NewCharge, rt.Replay, rt.BareNew, rt.BareReplay, st.NewCharge, st.Replay, st.BareNew, st.BareReplay)
	return nil
}

// send posts one request and returns its status.
func (e *env) send(ctx context.Context, base string, r request) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/charges", bytes.NewReader(r.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	req.Header.Set("Idempotency-Key", r.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func pgHost(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		return "127.0.0.1:5432"
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return net.JoinHostPort(u.Host, "5432")
	}
	return u.Host
}
