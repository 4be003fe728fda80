package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/phasepay/phasepay/client"
	"github.com/phasepay/phasepay/tools/procs"
)

// A kill of an idle worker abandons nothing: at this mix a worker has a
// request under way a few percent of the time. So each kill sends a few
// new charges straight to the victim and kills it while they are under way
// (killAfter: past the claim of most, before their answer), and the
// client then drives each to its end with the same key through the other
// workers, where it waits out the lease and takes the key over, unless the
// reaper finished it first. Result.Takeovers counts the keys taken over.
const (
	inFlightAtKill = 3
	killAfter      = 8 * time.Millisecond
)

// killer SIGKILLs the victim every KillEvery (first at half of it).
type killer struct {
	victim *procs.Process
	base   string // the victim's base URL
	apiKey string
	d      *driver
	hc     *http.Client
}

// run kills until ctx ends and returns how many times; ops is the context
// the abandoned charges are driven under, as every operation's.
func (k *killer) run(ctx, ops context.Context, start time.Time, every time.Duration) int {
	kills := 0
	for next := start.Add(every / 2); ; next = next.Add(every) {
		select {
		case <-ctx.Done():
			return kills
		case <-time.After(time.Until(next)):
		}
		k.killMidFlight(ops)
		kills++
	}
}

func (k *killer) killMidFlight(ctx context.Context) {
	intents := make([]client.Intent, inFlightAtKill)
	var sent sync.WaitGroup
	for i := range intents {
		intents[i] = client.NewIntent(client.ChargeParams{Amount: 1000 + int64(i), Currency: "usd", PaymentMethod: "pm_card_visa"})
		sent.Go(func() { k.send(ctx, intents[i]) })
	}
	time.Sleep(killAfter)
	k.victim.Signal(syscall.SIGKILL)
	sent.Wait()
	for _, in := range intents {
		k.d.resume(ctx, in)
	}
}

// send posts a new charge to the victim alone; its answer, if it comes
// before the kill, is the client's to replay.
func (k *killer) send(ctx context.Context, in client.Intent) {
	body, err := json.Marshal(in.Params)
	if err != nil {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.base+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+k.apiKey)
	req.Header.Set("Idempotency-Key", in.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.hc.Do(req)
	if err != nil {
		return // the kill, as intended
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
