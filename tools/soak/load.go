package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/phasepay/phasepay/client"
)

// The operations of the mix, as the series name them.
const (
	opNew     = "new_charge"
	opReplay  = "replay"
	opCapture = "capture"
	opRefund  = "refund"
	opWebhook = "webhook_delivery"
	// opKilled is the new charges under way on the victim when it was
	// killed (kill.go), driven to their end afterwards; not paced, not
	// timed.
	opKilled = "killed_in_flight"
)

// The mix, per new charge: the other operations are paced at these shares
// of Config.Rate. A replay resends a finished charge's key and body; a
// capture takes a recent authorized charge (a third of them in part); a
// refund gives back 30% of a recent captured charge.
var mix = []struct {
	op    string
	share float64
}{
	{opNew, 1}, {opReplay, 0.5}, {opCapture, 0.5}, {opRefund, 0.25},
}

const (
	// declinedShare of new charges use a card the mock PSP declines (402).
	declinedShare = 0.05
	// keptForReplay bounds the finished charges a replay picks from, and
	// keptForOps the charges waiting for a capture or a refund: the
	// harness's memory stays flat too.
	keptForReplay = 5000
	keptForOps    = 2000
	// maxInFlight bounds the operations under way; a tick that finds them
	// all busy is skipped and counted (OpStats.Skipped): the mix did not
	// keep its pace.
	maxInFlight = 128
	// maxProblems bounds the examples of unexpected answers kept.
	maxProblems = 20
)

// OpStats counts one operation of the mix.
type OpStats struct {
	// Sent counts the operations started; Ended those with the answer the
	// mix expects (a new charge authorized or declined, a replay
	// byte-identical to the first answer, a capture 200, a refund 201).
	Sent  int `json:"sent"`
	Ended int `json:"ended"`
	// Unexpected counts other final answers, NoAnswer the operations the
	// client gave up (examples in Result.Problems).
	Unexpected int `json:"unexpected"`
	NoAnswer   int `json:"no_final_answer"`
	// Skipped counts the ticks on which maxInFlight operations were
	// already under way.
	Skipped int `json:"skipped"`
}

// finished is a new charge with its first final answer, for replays.
type finished struct {
	in   client.Intent
	body []byte
}

// held is a charge waiting for its capture or its refund.
type held struct {
	id     string
	amount int64 // authorized, or captured
}

// opKey carries an attempt's operation to the timing transport.
type opKey struct{}

// driver paces the mix through the retrying client, spreading attempts
// over the workers, and records each answered attempt's latency.
type driver struct {
	cl       *client.Client
	rate     float64
	inFlight chan struct{}
	running  sync.WaitGroup

	mu         sync.Mutex
	rnd        *rand.Rand
	lat        map[string][]time.Duration
	stats      map[string]*OpStats
	problems   []string
	done       []finished // a ring of keptForReplay
	doneNext   int
	authorized []held
	captured   []held
}

func newDriver(baseURL, apiKey string, rt http.RoundTripper, cfg *Config) (*driver, error) {
	d := &driver{rate: cfg.Rate, inFlight: make(chan struct{}, maxInFlight),
		rnd: rand.New(rand.NewPCG(cfg.Seed, 0x736f616b)), lat: map[string][]time.Duration{}, stats: map[string]*OpStats{}}
	for _, m := range mix {
		d.stats[m.op] = &OpStats{}
	}
	d.stats[opKilled] = &OpStats{}
	var err error
	d.cl, err = client.New(client.Config{
		BaseURL:        baseURL,
		APIKey:         apiKey,
		HTTPClient:     &http.Client{Transport: &timed{next: rt, record: d.record}, Timeout: 10 * time.Second},
		MaxElapsed:     cfg.Lease + 2*time.Minute,
		InitialBackoff: 50 * time.Millisecond,
		MaxBackoff:     time.Second,
		Rand:           rand.NewPCG(cfg.Seed, 1),
	})
	return d, err
}

// run paces every operation of the mix until ctx ends; ops is the context
// the operations themselves run under, which outlives the pacing so that
// an operation under way at the end still gets its answer (wait).
func (d *driver) run(ctx, ops context.Context) {
	var pacers sync.WaitGroup
	for _, m := range mix {
		pacers.Go(func() {
			t := time.NewTicker(time.Duration(float64(time.Second) / (d.rate * m.share)))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					d.tick(ops, m.op)
				}
			}
		})
	}
	pacers.Wait()
}

// wait returns when every operation started has ended.
func (d *driver) wait() { d.running.Wait() }

func (d *driver) tick(ctx context.Context, op string) {
	select {
	case d.inFlight <- struct{}{}:
	default:
		d.count(op, func(s *OpStats) { s.Skipped++ })
		return
	}
	d.running.Go(func() {
		defer func() { <-d.inFlight }()
		ctx := context.WithValue(ctx, opKey{}, op)
		switch op {
		case opNew:
			d.newCharge(ctx)
		case opReplay:
			d.replay(ctx)
		case opCapture:
			d.capture(ctx)
		case opRefund:
			d.refund(ctx)
		}
	})
}

func (d *driver) newCharge(ctx context.Context) {
	d.mu.Lock()
	pm := "pm_card_visa"
	if d.rnd.Float64() < declinedShare {
		pm = "pm_card_chargeDeclined"
	}
	amount := 100 + d.rnd.Int64N(100_000)
	d.mu.Unlock()
	in := client.NewIntent(client.ChargeParams{Amount: amount, Currency: "usd", PaymentMethod: pm})
	d.count(opNew, func(s *OpStats) { s.Sent++ })
	r := d.cl.Do(ctx, in)
	var apiErr *client.Error
	switch {
	case r.Err == nil && r.Charge.Status == client.StatusAuthorized:
		d.ended(opNew, func() {
			d.keep(finished{in: in, body: r.Charge.RawBody})
			d.authorized = push(d.authorized, held{id: r.Charge.ID, amount: r.Charge.Amount})
		})
	case errors.Is(r.Err, client.ErrDeclined) && errors.As(r.Err, &apiErr):
		d.ended(opNew, func() { d.keep(finished{in: in, body: apiErr.RawBody}) })
	default:
		d.unexpected(opNew, r)
	}
}

// resume drives a charge abandoned by the kill to its end, with its key,
// through the workers.
func (d *driver) resume(ctx context.Context, in client.Intent) {
	d.count(opKilled, func(s *OpStats) { s.Sent++ })
	d.running.Go(func() {
		r := d.cl.Do(ctx, in)
		if r.Err == nil && r.Charge.Status == client.StatusAuthorized {
			d.ended(opKilled, func() { d.keep(finished{in: in, body: r.Charge.RawBody}) })
			return
		}
		d.unexpected(opKilled, r)
	})
}

// replay resends a finished charge's key and body: the answer must be the
// first one, byte for byte.
func (d *driver) replay(ctx context.Context) {
	d.mu.Lock()
	if len(d.done) == 0 {
		d.mu.Unlock()
		return
	}
	f := d.done[d.rnd.IntN(len(d.done))]
	d.mu.Unlock()
	d.count(opReplay, func(s *OpStats) { s.Sent++ })
	r := d.cl.Do(ctx, f.in)
	var (
		apiErr *client.Error
		body   []byte
	)
	switch {
	case r.Err == nil:
		body = r.Charge.RawBody
	case errors.As(r.Err, &apiErr) && apiErr.Status < 500:
		body = apiErr.RawBody
	}
	if body != nil && bytes.Equal(body, f.body) {
		d.ended(opReplay, func() {})
		return
	}
	if body != nil {
		r.Err = fmt.Errorf("replay of %s differs from its first answer: %q, then %q", f.in.Key, f.body, body)
	}
	d.unexpected(opReplay, r)
}

func (d *driver) capture(ctx context.Context) {
	d.mu.Lock()
	var h held
	h, d.authorized = pop(d.authorized)
	partial := d.rnd.IntN(3) == 0
	d.mu.Unlock()
	if h.id == "" {
		return
	}
	p := client.CaptureParams{}
	if partial {
		amount := max(1, h.amount*7/10)
		p.Amount = &amount
	}
	d.count(opCapture, func(s *OpStats) { s.Sent++ })
	r := d.cl.Do(ctx, client.NewCaptureIntent(h.id, p))
	if r.Err == nil && r.Charge.Status == client.StatusCaptured {
		d.ended(opCapture, func() { d.captured = push(d.captured, held{id: h.id, amount: r.Charge.AmountCaptured}) })
		return
	}
	d.unexpected(opCapture, r)
}

func (d *driver) refund(ctx context.Context) {
	d.mu.Lock()
	var h held
	h, d.captured = pop(d.captured)
	d.mu.Unlock()
	if h.id == "" {
		return
	}
	amount := max(1, h.amount*3/10)
	d.count(opRefund, func(s *OpStats) { s.Sent++ })
	r := d.cl.Do(ctx, client.NewRefundIntent(client.RefundParams{Charge: h.id, Amount: &amount}))
	if r.Err == nil && r.Refund.Status == client.RefundSucceeded {
		d.ended(opRefund, func() {})
		return
	}
	d.unexpected(opRefund, r)
}

// keep remembers a finished charge for replays, under d.mu.
func (d *driver) keep(f finished) {
	if len(d.done) < keptForReplay {
		d.done = append(d.done, f)
		return
	}
	d.done[d.doneNext] = f
	d.doneNext = (d.doneNext + 1) % keptForReplay
}

// push adds a charge to a stack of keptForOps, dropping the oldest when it
// is full; pop takes the newest (zero when empty). Recent charges are
// captured and refunded, as a shop does.
func push(s []held, h held) []held {
	if len(s) == keptForOps {
		s = append(s[:0], s[1:]...)
	}
	return append(s, h)
}

func pop(s []held) (held, []held) {
	if len(s) == 0 {
		return held{}, s
	}
	return s[len(s)-1], s[:len(s)-1]
}

func (d *driver) count(op string, f func(*OpStats)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d.stats[op])
}

// ended counts an expected end of op and runs then under d.mu.
func (d *driver) ended(op string, then func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats[op].Ended++
	then()
}

func (d *driver) unexpected(op string, r client.Result) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var apiErr *client.Error
	switch {
	case r.Err == nil || errors.As(r.Err, &apiErr):
		d.stats[op].Unexpected++
	default:
		d.stats[op].NoAnswer++
	}
	if len(d.problems) < maxProblems {
		what := fmt.Sprint(r.Err)
		if r.Err == nil && r.Charge != nil {
			what = fmt.Sprintf("status %s", r.Charge.Status)
		}
		d.problems = append(d.problems, fmt.Sprintf("%s: %s", op, what))
	}
}

// record adds an answered attempt's latency.
func (d *driver) record(op string, took time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lat[op] = append(d.lat[op], took)
}

// latencies returns every operation's latencies since the last call (an
// operation without answers has none: its series gets no point).
func (d *driver) latencies() map[string][]time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.lat
	d.lat = map[string][]time.Duration{}
	for _, m := range mix {
		if _, ok := out[m.op]; !ok {
			out[m.op] = nil
		}
	}
	return out
}

// snapshot returns the counts and the problems so far.
func (d *driver) snapshot() (map[string]OpStats, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]OpStats{}
	for op, s := range d.stats {
		out[op] = *s
	}
	return out, append([]string(nil), d.problems...)
}

// timed times every attempt that gets an answer (until its headers: the
// bodies are a few hundred bytes), by the operation its context names. An
// attempt without one (the killed worker's) is the client's to retry, not
// a latency.
type timed struct {
	next   http.RoundTripper
	record func(op string, took time.Duration)
}

func (t *timed) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	if op, ok := r.Context().Value(opKey{}).(string); ok && err == nil {
		t.record(op, time.Since(start))
	}
	return resp, err
}
