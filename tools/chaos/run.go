package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/client"
	"github.com/phasepay/phasepay/tools/chaos/history"
	"github.com/phasepay/phasepay/tools/procs"
)

// intent is one user intent and the first final answer it got.
type intent struct {
	in     client.Intent
	status int    // final status (201, 402, or 503 payment_unresolved), 0 if none
	code   string // the problem code of a 402 or 503
	body   []byte // the final answer's body
	err    error  // why there is no final answer
	life   *life  // what follows an authorization (lives.go)
	probe  bool   // a request of another endpoint follows under its key (history.go)
}

// harness is one run's load and its watchers over a started stack: what
// the steps of Run share.
type harness struct {
	cfg   *Config
	st    *stack
	start time.Time
	// rnd draws the intents, then the chaos controller's every choice
	// (inject.go), in that order: a seed makes the same run only while the
	// draws stay in that order. The other schedules have streams of their
	// own.
	rnd *rand.Rand
	sum *Summary
	// rec records the faults and the series of the run (series.go).
	rec *recorder

	// lock_version must only grow: sampled while the chaos runs, until
	// stopSampling; sampled is closed when the sampler has returned.
	sampleCtx    context.Context
	stopSampling context.CancelFunc
	sampled      chan struct{}
	monoMu       sync.Mutex
	monoFaults   []string

	intents        []*intent
	attempts       atomic.Int64
	mismatchProbes atomic.Int64
	answersMu      sync.Mutex
	answers        map[string]int // failed attempts by status and problem code
	// answers5xx: when attempts (intents' and lives') were answered 5xx;
	// probe: writes through the multi-host URL (both failover.go).
	answers5xx answerLog
	probe      writeProbe
	transport  *procs.RotatingTransport
	cl         *client.Client
	// history records every client request sent through rt (the
	// transport, recorded): the intents', the lives', the replays', the
	// probes' (history.go).
	history *history.Log
	rt      http.RoundTripper

	sink    *webhookSink
	backlog *backlogSampler
	ops     *opDriver // the lives of the authorized intents (lives.go)

	// hanging is the tenant whose endpoints all hang (webhookfair.go);
	// it writes events, and the commit watcher reads the chaos tenant's,
	// until stopFair.
	hanging  *hangingTenant
	stopFair context.CancelFunc

	finished    atomic.Int64  // intents final, and their lives ended
	clientsDone chan struct{} // closed when every intent and life has ended

	// The fault injectors (inject.go), each reporting on its channel when
	// it is done.
	db          *dbChaos
	dbDone      chan error
	outages     *pspOutages
	outagesDone chan error
	chaosDone   chan struct{}
}

// Run runs the harness and returns its summary. Violations are in the
// summary; an error means the run itself could not be carried out.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	cfg.defaults()
	h := &harness{cfg: &cfg, start: time.Now(), rnd: rand.New(rand.NewPCG(cfg.Seed, 0x70706179)),
		sum: &Summary{Seed: cfg.Seed, Intents: cfg.Intents, CrashPoints: map[string]int{}}}
	h.rec = newRecorder(h.start)

	// Deferred first, so closed last: see stack.close.
	h.st = &stack{cfg: &cfg}
	defer h.st.close()
	if err := h.st.start(ctx); err != nil {
		return nil, err
	}

	// The watchers and the clients, torn down before the stack.
	h.startSampling(ctx)
	defer h.stopSampling()
	if cfg.Formation != nil {
		probeCtx, stopProbe := context.WithCancel(ctx)
		defer stopProbe()
		if err := h.probe.run(probeCtx, h.st.dbURL); err != nil {
			return nil, err
		}
	}
	h.planIntents()
	h.transport = procs.NewRotatingTransport(h.st.bases, &http.Transport{MaxIdleConnsPerHost: 64})
	defer h.transport.CloseIdleConnections()
	h.history = history.NewLog()
	h.history.NameTenant(h.st.apiKey, ConsoleTenant)
	h.rt = h.history.Transport(h.transport)
	if err := h.newClient(); err != nil {
		return nil, err
	}
	var err error
	if h.sink, err = startSink(&cfg); err != nil {
		return nil, err
	}
	defer h.sink.close()
	defer func() {
		if h.stopFair != nil {
			h.stopFair()
		}
	}()
	if err := h.subscribe(ctx); err != nil {
		return nil, err
	}

	// The load under faults, then the checks.
	h.driveIntents(ctx)
	h.injectFaults(ctx)
	if err := h.awaitLoad(ctx); err != nil {
		return nil, err
	}
	if err := h.settle(ctx); err != nil {
		return nil, err
	}
	h.collect()
	if err := h.verify(ctx); err != nil {
		return nil, err
	}
	if sum := h.sum.Failover; sum != nil {
		if sum.Losses, err = h.losses(ctx, h.st.pool, h.st.pspURL); err != nil {
			return nil, err
		}
	}
	if err := h.checkHistory(ctx); err != nil {
		return nil, err
	}
	h.sum.Duration = time.Since(h.start).Truncate(time.Millisecond).String()
	h.sum.Timeline = h.rec.Timeline()
	return h.sum, nil
}

// startSampling samples lock_version until stopSampling, and records
// every key whose lock_version went down.
func (h *harness) startSampling(ctx context.Context) {
	h.sampleCtx, h.stopSampling = context.WithCancel(ctx)
	h.sampled = make(chan struct{})
	go func() {
		defer close(h.sampled)
		seen := map[string]int64{}
		reported := map[string]bool{} // a key that went back once, reported once
		// Every takeover bumps its key's lock_version: the sum over the
		// keys of lock_version - 1 is the takeovers so far, and what it
		// grew by since the last sample the takeovers since (a sample cut
		// short by a database restart counts nothing).
		var takeovers int64
		for h.sampleCtx.Err() == nil {
			for k, v := range sampleLockVersions(h.sampleCtx, h.st.pool) {
				if prev, ok := seen[k]; ok && v < prev && !reported[k] {
					reported[k] = true
					h.monoMu.Lock()
					h.monoFaults = append(h.monoFaults, fmt.Sprintf("key %s: lock_version went from %d to %d", k, prev, v))
					h.monoMu.Unlock()
				}
				seen[k] = max(seen[k], v)
			}
			var total int64
			for _, v := range seen {
				total += v - 1
			}
			if total > takeovers {
				h.rec.Count(chartTakeovers, "takeovers", float64(total-takeovers))
				takeovers = total
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

// planIntents makes the intents, each with its key made once, before its
// first attempt, and plans their lives.
func (h *harness) planIntents() {
	cfg := h.cfg
	h.intents = make([]*intent, cfg.Intents)
	for i := range h.intents {
		pm := "pm_card_visa"
		if h.rnd.IntN(10) == 0 {
			pm = "pm_card_chargeDeclined"
		}
		h.intents[i] = &intent{in: client.Intent{
			Key:    fmt.Sprintf("chaos-%d-%05d", cfg.Seed, i),
			Params: client.ChargeParams{Amount: 100 + h.rnd.Int64N(100000), Currency: "usd", PaymentMethod: pm},
		}, probe: i%mismatchProbeEvery == mismatchProbeEvery-1}
	}
	planLives(cfg.Seed, h.intents)
}

// newClient makes the retrying client every intent is driven through,
// counting its attempts and, by answer, the failed ones.
func (h *harness) newClient() error {
	h.answers = map[string]int{}
	var err error
	h.cl, err = client.New(client.Config{
		BaseURL:        h.st.bases[0],
		APIKey:         h.st.apiKey,
		HTTPClient:     &http.Client{Transport: timed(h.rt, h.rec), Timeout: 5 * time.Second},
		Journal:        client.NewMemoryJournal(),
		MaxElapsed:     h.cfg.MaxElapsed,
		InitialBackoff: 50 * time.Millisecond,
		MaxBackoff:     time.Second,
		Rand:           rand.NewPCG(h.cfg.Seed, 1),
		OnAttempt: func(_ client.Intent, _ int, status int, err error) {
			h.attempts.Add(1)
			h.answers5xx.add(status)
			if status >= 500 || status == 0 {
				h.answersMu.Lock()
				h.answers[answerClass(status, err)]++
				h.answersMu.Unlock()
			}
		},
	})
	return err
}

// subscribe registers the webhook sink for every event before the first
// one, and samples the backlog while the run goes on.
func (h *harness) subscribe(ctx context.Context) error {
	var err error
	if h.sum.Webhooks.Endpoint, err = h.sink.register(ctx, h.rt, h.st.apiKey); err != nil {
		return err
	}
	if err := h.st.pool.QueryRow(ctx, `SELECT id FROM tenants WHERE name = 'chaos'`).Scan(&h.sink.tenantID); err != nil {
		return fmt.Errorf("chaos tenant: %w", err)
	}
	var fairCtx context.Context
	fairCtx, h.stopFair = context.WithCancel(ctx)
	if h.hanging, err = startHangingTenant(fairCtx, h.st, h.sink, h.rt); err != nil {
		return err
	}
	go h.sink.watchCommits(fairCtx, h.st.pool, h.sink.tenantID)
	h.backlog = &backlogSampler{tenantID: h.sink.tenantID, rec: h.rec}
	go h.backlog.run(h.sampleCtx, h.st.pool)
	h.ops = newOpDriver(timed(h.rt, h.rec), h.st.apiKey, h.cfg)
	h.ops.onAnswer = h.answers5xx.add
	return nil
}

// driveIntents drives the intents, Concurrency at a time, and each
// authorized one's life after it; clientsDone is closed when all have
// ended.
func (h *harness) driveIntents(ctx context.Context) {
	h.clientsDone = make(chan struct{})
	go func() {
		defer close(h.clientsDone)
		work := make(chan *intent)
		var wg sync.WaitGroup
		for range h.cfg.Concurrency {
			wg.Go(func() {
				for it := range work {
					h.rec.Count(chartIntents, "started", 1)
					drive(ctx, h.cl, it)
					h.rec.Count(chartIntents, "ended "+it.outcome(), 1)
					h.probeMismatch(ctx, it)
					h.ops.goLive(ctx, it, func() { h.finished.Add(1) })
				}
			})
		}
		for _, it := range h.intents {
			work <- it
		}
		close(work)
		wg.Wait()
		h.ops.wait()
	}()
}

// drive runs one intent to its first final answer.
func drive(ctx context.Context, cl *client.Client, it *intent) {
	ch, err := cl.Execute(ctx, it.in)
	var apiErr *client.Error
	switch {
	case err == nil:
		it.status, it.body = http.StatusCreated, ch.RawBody
	case (errors.Is(err, client.ErrDeclined) || errors.Is(err, client.ErrPaymentFailed)) && errors.As(err, &apiErr):
		it.status, it.code, it.body = apiErr.Status, apiErr.Problem.Code, apiErr.RawBody
	case errors.Is(err, client.ErrUnresolved) && errors.As(err, &apiErr):
		// Given up by the server: an end, if verify finds the key
		// needs_attention with a reason. Not a stored answer: no replay
		// of its body is expected.
		it.status, it.code, it.body = apiErr.Status, apiErr.Problem.Code, apiErr.RawBody
	default:
		it.err = err
	}
}

// answerClass names a failed attempt's answer for the summary: the status
// and problem code ("503 database_unavailable"), or "no answer" (a killed,
// frozen or unreachable worker).
func answerClass(status int, err error) string {
	if status == 0 {
		return "no answer"
	}
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Problem.Code != "" {
		return fmt.Sprintf("%d %s", status, apiErr.Problem.Code)
	}
	return fmt.Sprint(status)
}

func sampleLockVersions(ctx context.Context, pool *pgxpool.Pool) map[string]int64 {
	rows, err := pool.Query(ctx, `SELECT key, lock_version FROM idempotency_keys`)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for rows.Next() {
		var (
			k string
			v int64
		)
		if rows.Scan(&k, &v) == nil {
			out[k] = v
		}
	}
	rows.Close()
	return out
}
