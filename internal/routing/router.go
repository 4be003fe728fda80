package routing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/telemetry"
)

// Client is one PSP as the Router calls it (*psp.Client).
type Client interface {
	AuthorizeOutcome(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error)
	OperateOutcome(ctx context.Context, req psp.OperationRequest) (psp.Outcome, error)
	Lookup(ctx context.Context, reference string) ([]psp.Authorization, error)
	FindOperation(ctx context.Context, req psp.OperationRequest) (psp.Operation, bool, error)
}

// Options are a Router's optional collaborators.
type Options struct {
	// Logger receives a line when a breaker opens or closes. Default
	// slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the per-PSP metrics. Default no-op.
	MeterProvider metric.MeterProvider
	// Now is the breakers' clock. Default time.Now.
	Now func() time.Time
}

// ErrUnknownPSP: an operation names a PSP this process has no client for
// (PSPS lost a name the database still holds). Its outcome is unknown (it
// wraps psp.ErrUnavailable): the charge waits, on the retry schedule and
// then as needs_attention, until the PSP is configured again.
var ErrUnknownPSP = errors.New("PSP not configured")

// Router sends each operation to the PSP it names and keeps a breaker and
// metrics per PSP. It is safe for concurrent use.
type Router struct {
	cfg      Config
	clients  map[string]Client
	breakers map[string]*Breaker
	log      *slog.Logger

	calls       metric.Int64Counter
	requests    metric.Int64Counter
	duration    metric.Float64Histogram
	openings    metric.Int64Counter
	skipped     metric.Int64Counter
	failovers   metric.Int64Counter
	breakerGage metric.Int64ObservableGauge

	// The label sets of a call's measurements, one per combination.
	callAttrs     *telemetry.AttrSets[[3]string] // psp, operation, class
	durationAttrs *telemetry.AttrSets[[2]string] // psp, operation
	requestAttrs  *telemetry.AttrSets[[2]string] // psp, kind
}

// New returns a Router over clients, one per PSP of cfg.
func New(cfg Config, clients map[string]Client, opts Options) (*Router, error) {
	if len(cfg.PSPs) == 0 {
		return nil, errors.New("routing: no PSP")
	}
	cfg.BreakerThreshold = cmp.Or(cfg.BreakerThreshold, BreakerThresholdDefault)
	cfg.BreakerCooldown = cmp.Or(cfg.BreakerCooldown, BreakerCooldownDefault)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	r := &Router{cfg: cfg, clients: clients, breakers: map[string]*Breaker{}, log: log}
	if err := r.instruments(mp.Meter("github.com/phasepay/phasepay/internal/routing")); err != nil {
		return nil, err
	}
	for _, p := range cfg.PSPs {
		if clients[p.Name] == nil {
			return nil, fmt.Errorf("routing: no client for PSP %q", p.Name)
		}
		name := p.Name
		r.breakers[name] = NewBreaker(cfg.BreakerThreshold, cfg.BreakerCooldown, opts.Now, func(from, to State) {
			switch to {
			case Open:
				r.openings.Add(context.Background(), 1, metric.WithAttributes(attrPSP.String(name)))
				r.log.Warn("psp breaker opened: new charges skip this PSP", "psp", name, "from", from.String())
			case Closed:
				r.log.Info("psp breaker closed: new charges may start at this PSP again", "psp", name)
			default:
				r.log.Info("psp breaker half-open: the next new charge probes this PSP", "psp", name)
			}
		})
	}
	return r, nil
}

var (
	attrPSP       = attribute.Key("psp")
	attrOperation = attribute.Key("operation")
	attrClass     = attribute.Key("outcome")
	attrKind      = attribute.Key("kind")
	attrFrom      = attribute.Key("from")
)

func (r *Router) instruments(m metric.Meter) error {
	r.callAttrs = telemetry.NewAttrSets(func(k [3]string) []attribute.KeyValue {
		return []attribute.KeyValue{attrPSP.String(k[0]), attrOperation.String(k[1]), attrClass.String(k[2])}
	})
	r.durationAttrs = telemetry.NewAttrSets(func(k [2]string) []attribute.KeyValue {
		return []attribute.KeyValue{attrPSP.String(k[0]), attrOperation.String(k[1])}
	})
	r.requestAttrs = telemetry.NewAttrSets(func(k [2]string) []attribute.KeyValue {
		return []attribute.KeyValue{attrPSP.String(k[0]), attrKind.String(k[1])}
	})
	var errs [7]error
	r.calls, errs[0] = m.Int64Counter("phasepay.psp.calls",
		metric.WithDescription("PSP calls (one attempt of an operation, its quick retries and lookups included), by psp, operation and outcome class."))
	r.requests, errs[1] = m.Int64Counter("phasepay.psp.requests",
		metric.WithDescription("HTTP requests sent to a PSP, by psp and kind (send, lookup)."))
	r.duration, errs[2] = m.Float64Histogram("phasepay.psp.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of a PSP call, by psp and operation."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	r.openings, errs[3] = m.Int64Counter("phasepay.psp.breaker.openings",
		metric.WithDescription("Times a PSP's circuit breaker opened, by psp."))
	r.skipped, errs[4] = m.Int64Counter("phasepay.routing.skipped",
		metric.WithDescription("New charges routed around a PSP whose breaker was open, by the psp skipped."))
	r.failovers, errs[5] = m.Int64Counter("phasepay.routing.failovers",
		metric.WithDescription("Charges moved to their next PSP after a refusal (nothing done at the first), by from and psp."))
	r.breakerGage, errs[6] = m.Int64ObservableGauge("phasepay.psp.breaker.state",
		metric.WithDescription("A PSP's circuit breaker in this process: 0 closed, 1 half-open, 2 open."))
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("routing: instruments: %w", err)
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for name, b := range r.breakers {
			o.ObserveInt64(r.breakerGage, int64(b.State()), metric.WithAttributes(attrPSP.String(name)))
		}
		return nil
	}, r.breakerGage)
	return err
}

// Single reports PSP_URL's mode: one PSP, whose authorization key stays
// <charge>:authorize.
func (r *Router) Single() bool { return r.cfg.Single }

// Choose returns the PSP a new charge in currency starts at. A pinned
// charge, whose id a retry of a claim lost in a failover derives again,
// starts at its route's first PSP whatever a breaker says: the lost claim
// may have sent it there, and only that PSP's idempotency key can answer
// the retry with the first answer (pitfall F3 "A second PSP after a lost
// claim"). Any other starts at the first PSP of its route whose
// breaker lets it in, or the route's first when every breaker is open (a
// charge must start somewhere; it then waits there like any charge facing
// an unknown outcome): nothing can have been sent anywhere for it yet.
func (r *Router) Choose(currency string, pinned bool) string {
	route := r.cfg.Route(currency)
	if r.cfg.Single || len(route) == 1 || pinned {
		return route[0]
	}
	for i, name := range route {
		if r.breakers[name].Allow() {
			for _, skipped := range route[:i] {
				r.skipped.Add(context.Background(), 1, metric.WithAttributes(attrPSP.String(skipped)))
			}
			return name
		}
	}
	return route[0]
}

// Next returns the PSP a charge in currency moves to after a refusal at
// its current PSP, none of tried (every PSP it was sent to): the next of
// its route in order whose breaker is not open, else the next at all; for
// a pinned charge (see Choose) the next in order, whatever a breaker says.
// It reports false when the route has no PSP left. The caller moves the
// charge only on an answer that proves the current PSP did nothing and
// never will (a refusal), never on an unknown outcome.
func (r *Router) Next(currency string, tried []string, pinned bool) (string, bool) {
	var left []string
	for _, name := range r.cfg.Route(currency) {
		if !slices.Contains(tried, name) {
			left = append(left, name)
		}
	}
	if len(left) == 0 {
		return "", false
	}
	if pinned {
		return left[0], true
	}
	for _, name := range left {
		if r.breakers[name].State() != Open {
			return name, true
		}
	}
	return left[0], true
}

// CountFailover records a charge moved from one PSP to another.
func (r *Router) CountFailover(from, to string) {
	r.failovers.Add(context.Background(), 1, metric.WithAttributes(attrFrom.String(from), attrPSP.String(to)))
}

// BreakerState returns the state of name's breaker (Closed for a name it
// does not know).
func (r *Router) BreakerState(name string) State {
	if b := r.breakers[name]; b != nil {
		return b.State()
	}
	return Closed
}

// client returns the client of name: the only one when name is empty and
// there is one PSP (callers that predate routing).
func (r *Router) client(name string) (string, Client, error) {
	if name == "" && len(r.cfg.PSPs) == 1 {
		name = r.cfg.PSPs[0].Name
	}
	c := r.clients[name]
	if c == nil {
		return name, nil, fmt.Errorf("psp %q: %w: %w", name, psp.ErrUnavailable, ErrUnknownPSP)
	}
	return name, c, nil
}

// HoldBack reports whether a pinned charge's first send to the PSP name is
// to be held back, and for how long (Breaker.HoldBack).
func (r *Router) HoldBack(name string) (time.Duration, bool) {
	b, ok := r.breakers[name]
	if !ok {
		return 0, false
	}
	return b.HoldBack()
}

// AuthorizeOutcome sends req to the PSP req.PSP names (psp.Client's rule
// for one attempt: lookup before any resend), records the outcome on its
// breaker and metrics, and names it in Outcome.PSP.
func (r *Router) AuthorizeOutcome(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error) {
	name, c, err := r.client(req.PSP)
	if err != nil {
		return psp.Outcome{Class: psp.ClassUnknown, Reason: err.Error(), PSP: name}, err
	}
	start := time.Now()
	out, err := c.AuthorizeOutcome(ctx, req)
	r.record(ctx, name, "authorize", start, out, err)
	out.PSP = name
	return out, err
}

// OperateOutcome sends a capture, void or refund to req.PSP, the PSP that
// holds the authorization, as AuthorizeOutcome.
func (r *Router) OperateOutcome(ctx context.Context, req psp.OperationRequest) (psp.Outcome, error) {
	name, c, err := r.client(req.PSP)
	if err != nil {
		return psp.Outcome{Class: psp.ClassUnknown, Reason: err.Error(), PSP: name}, err
	}
	start := time.Now()
	out, err := c.OperateOutcome(ctx, req)
	r.record(ctx, name, string(req.Kind), start, out, err)
	out.PSP = name
	return out, err
}

// LookupAt looks reference up at the PSP name.
func (r *Router) LookupAt(ctx context.Context, name, reference string) ([]psp.Authorization, error) {
	name, c, err := r.client(name)
	if err != nil {
		return nil, err
	}
	list, err := c.Lookup(ctx, reference)
	r.requests.Add(ctx, 1, r.requestAttrs.Get([2]string{name, "lookup"}))
	return list, err
}

// FindOperation looks a capture, void or refund up at req.PSP, the PSP
// that holds its authorization (psp.Client.FindOperation).
func (r *Router) FindOperation(ctx context.Context, req psp.OperationRequest) (psp.Operation, bool, error) {
	name, c, err := r.client(req.PSP)
	if err != nil {
		return psp.Operation{}, false, err
	}
	op, found, err := c.FindOperation(ctx, req)
	r.requests.Add(ctx, 1, r.requestAttrs.Get([2]string{name, "lookup"}))
	return op, found, err
}

// Lookup looks reference up at every PSP (an operator's resolution asks
// what any of them holds): the authorizations of all, in PSPS's order. Any
// failure fails it: a PSP that could not be asked may hold one.
func (r *Router) Lookup(ctx context.Context, reference string) ([]psp.Authorization, error) {
	var all []psp.Authorization
	for _, p := range r.cfg.PSPs {
		list, err := r.LookupAt(ctx, p.Name, reference)
		if err != nil {
			return nil, fmt.Errorf("psp %s: %w", p.Name, err)
		}
		all = append(all, list...)
	}
	return all, nil
}

func (r *Router) record(ctx context.Context, name, op string, start time.Time, out psp.Outcome, err error) {
	if errors.Is(err, context.Canceled) {
		return // the caller left: nothing learnt about the PSP
	}
	r.breakers[name].Record(out.Class)
	r.calls.Add(ctx, 1, r.callAttrs.Get([3]string{name, op, out.Class.String()}))
	r.duration.Record(ctx, time.Since(start).Seconds(), r.durationAttrs.Get([2]string{name, op}))
	if out.Sent > 0 {
		r.requests.Add(ctx, int64(out.Sent), r.requestAttrs.Get([2]string{name, "send"}))
	}
	if out.Lookups > 0 {
		r.requests.Add(ctx, int64(out.Lookups), r.requestAttrs.Get([2]string{name, "lookup"}))
	}
}
