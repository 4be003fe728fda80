package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/tools/procs"
)

// Routing between PSPs under chaos (Config.PSPs > 1). The run's mock PSP
// is the "primary"; others ("secondary", "tertiary", ...) run beside it as
// processes of their own with the same ordinary faults, and the workers and
// reapers get PSPS and PSP_ROUTING instead of PSP_URL (usd, every intent's
// currency: primary>secondary>tertiary). For stretches of the load one
// PSP at a time goes down (503 to everything), refuses every new request
// (400: the one outcome that moves a charge on) or drops every answer after
// acting (the outcome that must never move one). The kills at every crash
// point include the attempt boundaries: the claim (first attempt), the
// failover's commit (after_charge_created) and after each PSP call.
//
// The run's checks read the PSPs through one admin view (adminView) that
// merges the mocks' books, so "authorized twice by the PSP" now means by
// any two PSPs; routing's own checks (verify below) add that an authorized
// charge records the PSP that holds its authorization, that a declined
// charge was sent to one PSP only, that no PSP received a charge without
// an attempt naming it committed first, and that a charge moved on only
// after a refusal.

// RoutingStats is what routing did in a run.
type RoutingStats struct {
	PSPs int `json:"psps"`
	// Failovers: charges moved to a next PSP after a refusal.
	Failovers int `json:"failovers"`
	// RoutedAround: charges that started past the first PSP of their
	// route. Every charge of the run has a derived id, which must start at
	// its route's first PSP whatever a breaker says (a retry of a claim
	// lost in a failover must find the PSP the claim went to): each is a
	// violation.
	RoutedAround int `json:"routed_around_open_breaker"`
	// BreakerOpenings: breakers opened, over every api and reaper process.
	BreakerOpenings int `json:"breaker_openings"`
	// Stretches of one PSP down, refusing or dropping answers, by kind.
	Stretches     map[string]int `json:"stretches"`
	StretchTotal  string         `json:"stretch_total"`
	ChargesAt     map[string]int `json:"charges_at"`
	PSPsPerCharge int            `json:"max_psps_holding_one_charge"`
}

// pspNames names the run's PSPs in route order.
func pspNames(n int) []string {
	names := []string{"primary", "secondary", "tertiary"}
	for i := len(names); i < n; i++ {
		names = append(names, fmt.Sprintf("psp%d", i))
	}
	return names[:n]
}

// pspSet is the run's PSPs when there are several.
type pspSet struct {
	cfg   *Config
	names []string
	urls  []string
	mocks []*procs.Process // every mock but the primary, which Run owns
	admin *http.Server
	view  string // the admin view's base URL

	stretchesDone chan struct{}
	rec           *recorder // set by the harness before startStretches
	stats         RoutingStats
	mu            sync.Mutex
	extra         int // the harness's own new charges (newCharges)
}

// startPSPs starts the PSPs after the primary (at primaryURL) and the admin
// view over all of them; nil when the run has one PSP.
func startPSPs(ctx context.Context, cfg *Config, mockpsp, primaryURL string) (*pspSet, error) {
	if cfg.PSPs < 2 {
		return nil, nil
	}
	s := &pspSet{cfg: cfg, names: pspNames(cfg.PSPs), urls: []string{primaryURL},
		stats: RoutingStats{PSPs: cfg.PSPs, Stretches: map[string]int{}, ChargesAt: map[string]int{}}}
	for _, name := range s.names[1:] {
		addr, err := procs.FreeAddr()
		if err != nil {
			return nil, err
		}
		p := procs.New("mockpsp-"+name, mockpsp, map[string]string{
			"MOCKPSP_ADDR": addr, "MOCKPSP_NAME": name,
			"MOCKPSP_ERROR_RATE": fmt.Sprint(cfg.ErrorRate), "MOCKPSP_DROP_RATE": fmt.Sprint(cfg.DropRate),
			"MOCKPSP_LATENCY": fmt.Sprint(cfg.LatencyMS), "MOCKPSP_REJECT_RATE": fmt.Sprint(cfg.RejectRate),
			"MOCKPSP_LOOKUP_ERROR_RATE": fmt.Sprint(cfg.LookupErrorRate), "MOCKPSP_KEY_TTL": cfg.KeyTTL.String(),
		})
		if err := p.Start(); err != nil {
			s.stop()
			return nil, err
		}
		s.mocks = append(s.mocks, p)
		u := "http://" + addr
		if err := procs.WaitUp(ctx, u+"/_admin/authorizations"); err != nil {
			s.stop()
			return nil, fmt.Errorf("mock psp %s: %w\n%s", name, err, p.LogText())
		}
		s.urls = append(s.urls, u)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.stop()
		return nil, err
	}
	s.admin = &http.Server{Handler: http.HandlerFunc(s.serveAdmin), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.admin.Serve(ln) }()
	s.view = "http://" + ln.Addr().String()
	return s, nil
}

// viewOr is the URL the run's checks read the PSP at: the admin view, or
// the one PSP's own.
func (s *pspSet) viewOr(pspURL string) string {
	if s == nil {
		return pspURL
	}
	return s.view
}

// wire gives every process the PSPs instead of PSP_URL, and breakers quick
// enough to open and close within a run.
func (s *pspSet) wire(common map[string]string) {
	if s == nil {
		return
	}
	delete(common, "PSP_URL")
	var psps []string
	for i, n := range s.names {
		psps = append(psps, n+"="+s.urls[i])
	}
	common["PSPS"] = strings.Join(psps, ",")
	common["PSP_ROUTING"] = "usd:" + strings.Join(s.names, ">") + ",*:" + strings.Join(s.names, ">")
	common["PSP_BREAKER_THRESHOLD"] = "3"
	common["PSP_BREAKER_COOLDOWN"] = "3s"
}

func (s *pspSet) stop() {
	if s == nil {
		return
	}
	if s.admin != nil {
		_ = s.admin.Close()
	}
	for _, p := range s.mocks {
		p.Stop(5 * time.Second)
	}
}

// serveAdmin merges the mocks' /_admin lists (and sums their injected
// faults); PUT /_admin/faults goes to the primary alone (the run's outages).
func (s *pspSet) serveAdmin(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPut:
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPut, s.urls[0]+r.URL.Path, r.Body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	case r.URL.Path == "/_admin/faults":
		sum := map[string]int{}
		for _, u := range s.urls {
			var f struct{ Injected map[string]int }
			if err := getJSON(r.Context(), u+r.URL.Path, &f); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			for k, v := range f.Injected {
				sum[k] += v
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"injected": sum})
	default:
		all := []json.RawMessage{}
		for _, u := range s.urls {
			var l struct{ Data []json.RawMessage }
			if err := getJSON(r.Context(), u+r.URL.Path, &l); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			all = append(all, l.Data...)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": all})
	}
}

// startStretches plays stretches of one PSP down, refusing or dropping
// answers until the clients are done, each 1 to 3 s with 1 to 3 s between;
// the PSP gets the ordinary faults back after each, and when ctx ends.
func (s *pspSet) startStretches(ctx context.Context, clientsDone <-chan struct{}, progress io.Writer, rt http.RoundTripper, apiKey string) {
	if s == nil {
		return
	}
	s.stretchesDone = make(chan struct{})
	rnd := rand.New(rand.NewPCG(s.cfg.Seed, 0x72747273))
	// The primary's stretches may overlap the run's outages (which also
	// target it): whichever ends first restores the ordinary faults early.
	targets := s.urls
	ordinary := faults{ErrorRate: s.cfg.ErrorRate, DropRate: s.cfg.DropRate, RejectRate: s.cfg.RejectRate,
		LookupErrorRate: s.cfg.LookupErrorRate, LatencyMS: s.cfg.LatencyMS}
	go func() {
		defer close(s.stretchesDone)
		var total time.Duration
		first := true
		defer func() {
			s.mu.Lock()
			s.stats.StretchTotal = total.Truncate(time.Millisecond).String()
			s.mu.Unlock()
		}()
		for {
			select {
			case <-clientsDone:
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Second + time.Duration(rnd.Int64N(int64(2*time.Second)))):
			}
			i := rnd.IntN(len(targets))
			f, kind := ordinary, ""
			pick := rnd.IntN(3)
			if first && len(targets) == len(s.urls) {
				// The first stretch takes the route's first PSP down, so
				// that every run sees breakers open and new charges start
				// at that PSP all the same.
				i, pick = 0, 0
			}
			first = false
			switch pick {
			case 0:
				// Half the outages at the first PSP of the route, whose
				// open breakers must not send new charges elsewhere.
				if rnd.IntN(2) == 0 && len(targets) == len(s.urls) {
					i = 0
				}
				f.ErrorRate, kind = 1, "down"
			case 1:
				f.RejectRate, kind = 1, "refusing"
			default:
				f.DropRate, kind = 1, "dropping"
			}
			out := &pspOutages{pspURL: targets[i]}
			if err := out.set(ctx, f); err != nil {
				return
			}
			length := time.Second + time.Duration(rnd.Int64N(int64(2*time.Second)))
			if progress != nil {
				fmt.Fprintf(progress, "psp %s %s for %s\n", targets[i], kind, length)
			}
			ended := s.rec.Begin("psp_"+kind, s.names[i], fmt.Sprintf("%s %s for %s", s.names[i], kind, length))
			start := time.Now()
			if kind == "down" && i == 0 {
				// Every intent in flight is now waiting at the primary
				// (an unknown outcome never moves a charge), so none of
				// them is new: once the breakers had time to open, a few
				// charges of the harness's own are new ones, which must
				// still start at the primary (their ids are derived).
				s.newCharges(ctx, rt, apiKey, length)
			}
			select {
			case <-clientsDone:
			case <-ctx.Done():
			case <-time.After(length - time.Since(start)):
			}
			total += time.Since(start)
			_ = out.set(context.WithoutCancel(ctx), ordinary)
			ended()
			s.mu.Lock()
			s.stats.Stretches[kind]++
			s.mu.Unlock()
		}
	}()
}

// verify checks routing's invariants and fills sum.Routing.
func (s *pspSet) verify(ctx context.Context, pool *pgxpool.Pool, ps []*procs.Process, sum *Summary, violate func(string, ...any)) error {
	if s == nil {
		return nil
	}
	if s.stretchesDone != nil {
		<-s.stretchesDone
	}
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	sum.Routing = &st
	for _, p := range ps {
		st.BreakerOpenings += strings.Count(p.LogText(), `"msg":"psp breaker opened`)
	}

	type chargeRow struct{ status, psp, ref string }
	charges := map[string]chargeRow{}
	rows, err := pool.Query(ctx, `SELECT id, status, psp, coalesce(psp_reference, '') FROM charges`)
	if err != nil {
		return fmt.Errorf("verify routing: %w", err)
	}
	for rows.Next() {
		var id string
		var c chargeRow
		if err := rows.Scan(&id, &c.status, &c.psp, &c.ref); err != nil {
			rows.Close()
			return fmt.Errorf("verify routing: %w", err)
		}
		charges[id] = c
		st.ChargesAt[c.psp]++
	}
	rows.Close()
	attempted := map[string][]string{} // charge -> PSPs of its attempts, in order
	outcomes := map[string][]string{}
	rows, err = pool.Query(ctx, `SELECT charge_id, psp, coalesce(outcome, '') FROM charge_attempts ORDER BY charge_id, n`)
	if err != nil {
		return fmt.Errorf("verify routing: %w", err)
	}
	for rows.Next() {
		var id, p, o string
		if err := rows.Scan(&id, &p, &o); err != nil {
			rows.Close()
			return fmt.Errorf("verify routing: %w", err)
		}
		attempted[id] = append(attempted[id], p)
		outcomes[id] = append(outcomes[id], o)
	}
	rows.Close()
	if err := errors.Join(rows.Err()); err != nil {
		return fmt.Errorf("verify routing: %w", err)
	}

	heldBy := map[string][]string{} // charge -> PSPs holding an authorization
	heldID := map[string]string{}
	answeredBy := map[string][]string{} // charge -> PSPs holding an answer (authorized or declined)
	sentTo := map[string][]string{}     // charge -> PSPs that received a send
	for i, name := range s.names {
		var ledger struct {
			Data []struct{ ID, Reference, Status string }
		}
		if err := getJSON(ctx, s.urls[i]+"/_admin/authorizations", &ledger); err != nil {
			return fmt.Errorf("verify routing: %s: %w", name, err)
		}
		for _, a := range ledger.Data {
			if a.Status == "authorized" && !slices.Contains(heldBy[a.Reference], name) {
				heldBy[a.Reference] = append(heldBy[a.Reference], name)
				heldID[a.Reference] = a.ID
			}
			if !slices.Contains(answeredBy[a.Reference], name) {
				answeredBy[a.Reference] = append(answeredBy[a.Reference], name)
			}
		}
		var log struct {
			Data []struct{ Method, Path, Reference string }
		}
		if err := getJSON(ctx, s.urls[i]+"/_admin/requests", &log); err != nil {
			return fmt.Errorf("verify routing: %s: %w", name, err)
		}
		for _, r := range log.Data {
			if r.Method == http.MethodPost && r.Path == "/v1/authorizations" && r.Reference != "" && !slices.Contains(sentTo[r.Reference], name) {
				sentTo[r.Reference] = append(sentTo[r.Reference], name)
			}
		}
	}
	for id, c := range charges {
		held := heldBy[id]
		st.PSPsPerCharge = max(st.PSPsPerCharge, len(held))
		switch {
		case len(held) > 1:
			violate("charge %s: authorized at %d PSPs (%s)", id, len(held), strings.Join(held, ", "))
		case len(held) == 1 && lived(c.status) && (c.psp != held[0] || c.ref != heldID[id]):
			violate("charge %s: at %s (%s), but the authorization is %s at %s", id, c.psp, c.ref, heldID[id], held[0])
		}
		// Declined at one PSP, and sent nowhere after: the PSPs before it
		// refused (nothing done there); none after it ever answered.
		if at := answeredBy[id]; c.status == "declined" && (len(at) != 1 || at[0] != c.psp) {
			violate("charge %s: declined at %s, but answered by %s", id, c.psp, strings.Join(at, ", "))
		}
		for _, p := range sentTo[id] {
			if !slices.Contains(attempted[id], p) {
				violate("charge %s: sent to %s without an attempt recorded there", id, p)
			}
		}
		at := attempted[id]
		if len(at) > 1 {
			st.Failovers++
		}
		for n := 1; n < len(at); n++ {
			if outcomes[id][n-1] != "refused" {
				violate("charge %s: moved from %s to %s after %q, not a refusal", id, at[n-1], at[n], outcomes[id][n-1])
			}
		}
		if len(at) > 0 && at[0] != s.names[0] {
			st.RoutedAround++
			violate("charge %s: started at %s, not at its route's first PSP %s", id, at[0], s.names[0])
		}
	}
	sum.Routing = &st
	return nil
}

// routingRows adds the routing rows to the summary's table.
func (s *Summary) routingRows(row func(string, any)) {
	if s.Routing == nil {
		return
	}
	r := s.Routing
	row("PSPs (routing)", r.PSPs)
	for _, k := range []string{"down", "refusing", "dropping"} {
		row("  stretches: one PSP "+k, r.Stretches[k])
	}
	row("  stretches in total", r.StretchTotal)
	row("  failovers (after a refusal)", r.Failovers)
	row("  routed around an open breaker", r.RoutedAround)
	row("  breaker openings (all procs)", r.BreakerOpenings)
	row("  max PSPs holding one charge", r.PSPsPerCharge)
	for _, n := range slices.Sorted(maps.Keys(r.ChargesAt)) {
		row("  charges at "+n, r.ChargesAt[n])
	}
}

// newCharges posts a few new charges while the primary is down, through
// the workers in turn, after the breakers had half the stretch to open. Their
// ends are checked like every charge's (one PSP at most, the charge
// records it, it started at the primary), not their answers: a worker may
// be killed under them.
func (s *pspSet) newCharges(ctx context.Context, rt http.RoundTripper, apiKey string, within time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(within / 2):
	}
	hc := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	for range 6 {
		s.mu.Lock()
		s.extra++
		key := fmt.Sprintf("route-around-%d-%d", s.cfg.Seed, s.extra)
		s.mu.Unlock()
		body := `{"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://worker/v1/charges", strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}
