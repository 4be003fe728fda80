package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phasepay/phasepay/client"
)

// A payment's life: once its intent is authorized, the charge is captured
// (all of it or part) and then refunded 0 to 3 times, or voided; some lives
// send their capture and void at once under different keys (one must win),
// some send their refunds at once (they must never sum past the capture).
// Every operation goes through the same killed, frozen and crashing
// workers as the authorizations (every operation's crash points are in
// PHASEPAY_CHAOS_CRASH), each under its own Idempotency-Key, retried like
// the client retries a charge until it has a final answer.

// lifePlan is what happens to a charge once it is authorized, drawn before
// the run from the seed.
type lifePlan struct {
	void     bool   // void instead of capture
	race     bool   // capture and void sent at once
	capture  *int64 // nil: capture everything
	shares   []int  // refunds, in thousandths of the amount captured
	rest     bool   // one more refund without an amount: all that is left
	parallel bool   // the refunds sent at once
}

// life is one intent's life after its authorization.
type life struct {
	plan   lifePlan
	charge string // the authorized charge's id; "" when the intent was not authorized
	mu     sync.Mutex
	ops    []*lifeOp
}

// lifeOp is one capture, void or refund and its first final answer.
type lifeOp struct {
	kind   string // capture, void, refund
	key    string
	path   string
	body   []byte
	status int    // final status, 0 if none
	code   string // the problem code of an error answer
	resp   []byte
	err    error // why there is no final answer
}

// planLives draws each intent's life; the draws have a stream of their
// own, so the rest of the run draws what it drew before lives existed.
func planLives(seed uint64, intents []*intent) {
	rnd := rand.New(rand.NewPCG(seed, 0x6c697665))
	for _, it := range intents {
		var p lifePlan
		amount := it.in.Params.Amount
		switch x := rnd.IntN(100); {
		case x < 20:
			p.void = true
		case x < 26:
			p.race = true
		}
		if rnd.IntN(2) == 0 {
			partial := amount * int64(300+rnd.IntN(650)) / 1000
			p.capture = &partial
		}
		left := 1000
		for range rnd.IntN(4) {
			share := 50 + rnd.IntN(max(1, left/2))
			if share > left {
				break
			}
			p.shares = append(p.shares, share)
			left -= share
		}
		p.rest = len(p.shares) > 0 && rnd.IntN(4) == 0
		p.parallel = len(p.shares) > 1 && rnd.IntN(3) == 0
		it.life = &life{plan: p}
	}
}

// opDriver sends lives' operations through the workers, retrying each
// until a final answer.
type opDriver struct {
	hc         *http.Client
	apiKey     string
	maxElapsed time.Duration
	rnd        *lockedRand
	attempts   atomic.Int64
	lives      chan struct{} // a slot per life running beside the authorizations
	running    sync.WaitGroup
	onAnswer   func(status int) // if set, called with every answer's status
}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) durationN(d time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.r.Int64N(int64(d)) + 1)
}

func newOpDriver(rt http.RoundTripper, apiKey string, cfg *Config) *opDriver {
	return &opDriver{hc: &http.Client{Transport: rt, Timeout: 5 * time.Second}, apiKey: apiKey,
		maxElapsed: cfg.MaxElapsed, rnd: &lockedRand{r: rand.New(rand.NewPCG(cfg.Seed, 2))},
		lives: make(chan struct{}, cfg.Concurrency)}
}

// goLive runs the life of an authorized intent beside the next intents'
// authorizations (at most Concurrency lives at once, so captures, voids
// and refunds are in flight among the authorizations when workers die),
// and calls done when it has ended; at once for an intent not authorized.
func (d *opDriver) goLive(ctx context.Context, it *intent, done func()) {
	if it.life == nil || it.status != http.StatusCreated {
		done()
		return
	}
	d.lives <- struct{}{}
	d.running.Go(func() {
		defer func() { <-d.lives; done() }()
		d.live(ctx, it)
	})
}

// wait returns when every life started has ended.
func (d *opDriver) wait() { d.running.Wait() }

// live runs the life of an authorized intent (nothing for any other end).
func (d *opDriver) live(ctx context.Context, it *intent) {
	lf := it.life
	if lf == nil || it.status != http.StatusCreated {
		return
	}
	var ch struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
	}
	if err := json.Unmarshal(it.body, &ch); err != nil || ch.ID == "" {
		return // verify reports an authorized answer that is not a charge
	}
	lf.charge = ch.ID
	p := lf.plan
	capture := func() *lifeOp {
		body := []byte(`{}`)
		if p.capture != nil {
			body = fmt.Appendf(nil, `{"amount":%d}`, *p.capture)
		}
		return d.run(ctx, lf, &lifeOp{kind: "capture", key: it.in.Key + "-capture", path: "/v1/charges/" + ch.ID + "/capture", body: body})
	}
	void := func() *lifeOp {
		return d.run(ctx, lf, &lifeOp{kind: "void", key: it.in.Key + "-void", path: "/v1/charges/" + ch.ID + "/void", body: []byte(`{}`)})
	}
	var captured *lifeOp
	switch {
	case p.race:
		var wg sync.WaitGroup
		wg.Go(func() { void() })
		captured = capture()
		wg.Wait()
	case p.void:
		void()
		return
	default:
		captured = capture()
	}
	if captured.status != http.StatusOK {
		return
	}
	var c struct {
		AmountCaptured int64 `json:"amount_captured"`
	}
	_ = json.Unmarshal(captured.resp, &c)
	var bodies [][]byte
	for _, share := range p.shares {
		if amount := c.AmountCaptured * int64(share) / 1000; amount > 0 {
			bodies = append(bodies, fmt.Appendf(nil, `{"charge":%q,"amount":%d}`, ch.ID, amount))
		}
	}
	if p.rest {
		bodies = append(bodies, fmt.Appendf(nil, `{"charge":%q}`, ch.ID))
	}
	var wg sync.WaitGroup
	for i, body := range bodies {
		op := &lifeOp{kind: "refund", key: it.in.Key + "-refund-" + strconv.Itoa(i), path: "/v1/refunds", body: body}
		if p.parallel {
			wg.Go(func() { d.run(ctx, lf, op) })
		} else {
			d.run(ctx, lf, op)
		}
	}
	wg.Wait()
}

// run drives op to its first final answer and records it in lf.
func (d *opDriver) run(ctx context.Context, lf *life, op *lifeOp) *lifeOp {
	lf.mu.Lock()
	lf.ops = append(lf.ops, op)
	lf.mu.Unlock()
	deadline := time.Now().Add(d.maxElapsed)
	for n := 0; ; n++ {
		d.attempts.Add(1)
		status, code, body, retryAfter, err := d.send(ctx, op)
		if d.onAnswer != nil {
			d.onAnswer(status)
		}
		retry := err != nil || status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500
		if code == client.CodePaymentUnresolved {
			retry = false // only an operator changes it
		}
		if !retry {
			op.status, op.code, op.resp = status, code, body
			return op
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			op.err = fmt.Errorf("no final answer after %d attempts, the last %d %s %v", n+1, status, code, err)
			return op
		}
		wait := d.rnd.durationN(min(time.Second, 50*time.Millisecond<<min(n, 5)))
		wait = max(wait, min(retryAfter, 2*time.Second))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// send makes one attempt of op: its status, problem code, body and
// Retry-After, or the error of an attempt without an answer.
func (d *opDriver) send(ctx context.Context, op *lifeOp) (int, string, []byte, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://workers"+op.path, bytes.NewReader(op.body))
	if err != nil {
		return 0, "", nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+d.apiKey)
	req.Header.Set("Idempotency-Key", op.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, "", nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", nil, 0, err
	}
	var p struct{ Code string }
	if resp.StatusCode >= 400 {
		_ = json.Unmarshal(body, &p)
	}
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, p.Code, body, time.Duration(secs) * time.Second, nil
}
