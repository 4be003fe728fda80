package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// pspOutages takes the mock PSP down entirely (error_rate 1: every send and
// every lookup answers 503) for stretches longer than its key TTL, so that
// the keys an outage interrupts are forgotten by the PSP before they can be
// resolved, and (LongOutage) for one stretch longer than GIVE_UP_AFTER, so
// that some requests end needs_attention. Between outages the mock runs
// with the run's ordinary faults, which an outage's end restores.
type pspOutages struct {
	cfg    *Config
	rnd    *rand.Rand
	pspURL string
	rec    *recorder

	// Written by run only, read after it returned.
	count int
	total time.Duration
}

// faults is the body of PUT /_admin/faults.
type faults struct {
	ErrorRate       float64 `json:"error_rate"`
	DropRate        float64 `json:"drop_rate"`
	RejectRate      float64 `json:"reject_rate"`
	LookupErrorRate float64 `json:"lookup_error_rate"`
	LatencyMS       int     `json:"latency_ms"`
}

// run plays the outages until they are used up or the clients are done;
// the PSP is always left with the ordinary faults, also when ctx ends.
func (o *pspOutages) run(ctx context.Context, clientsDone <-chan struct{}, progress io.Writer) error {
	lengths := make([]time.Duration, o.cfg.Outages)
	for i := range lengths {
		lengths[i] = o.cfg.OutageLength + time.Duration(o.rnd.Int64N(int64(o.cfg.OutageLength)+1))
	}
	if o.cfg.LongOutage > 0 {
		lengths = append(lengths, 0)
		i := o.rnd.IntN(len(lengths))
		copy(lengths[i+1:], lengths[i:])
		lengths[i] = o.cfg.LongOutage
	}
	ordinary := faults{ErrorRate: o.cfg.ErrorRate, DropRate: o.cfg.DropRate, RejectRate: o.cfg.RejectRate,
		LookupErrorRate: o.cfg.LookupErrorRate, LatencyMS: o.cfg.LatencyMS}
	down := ordinary
	down.ErrorRate = 1
	for _, length := range lengths {
		gap := time.Duration(float64(o.cfg.OutageGap) * (0.5 + o.rnd.Float64()))
		select {
		case <-clientsDone:
			return nil
		case <-ctx.Done():
			return nil
		case <-time.After(gap):
		}
		if err := o.set(ctx, down); err != nil {
			return err
		}
		o.count++
		if progress != nil {
			fmt.Fprintf(progress, "psp outage %d: down for %s\n", o.count, length)
		}
		up := o.rec.Begin("psp_outage", "mockpsp", "error_rate 1, lookups too, for "+length.String())
		start := time.Now()
		select {
		case <-clientsDone:
		case <-ctx.Done():
		case <-time.After(length):
		}
		o.total += time.Since(start)
		err := o.set(context.WithoutCancel(ctx), ordinary)
		up()
		if err != nil {
			return err
		}
	}
	return nil
}

func (o *pspOutages) set(ctx context.Context, f faults) error {
	body, err := json.Marshal(f)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, o.pspURL+"/_admin/faults", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("psp outage: set faults: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("psp outage: set faults: %s: %s", resp.Status, b)
	}
	return nil
}
