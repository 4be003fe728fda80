package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"
)

// injectFaults starts the fault injectors beside the load: the database's
// restarts (on a cluster of the run's own), the PSP's outages and, with
// several PSPs, their stretches, and the chaos controller that kills and
// pauses workers. Each runs until the clients are done; awaitLoad waits
// for them.
func (h *harness) injectFaults(ctx context.Context) {
	cfg, st := h.cfg, h.st
	// The database's restarts, on a schedule of their own.
	h.db = &dbChaos{cluster: st.cluster, cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x64627273)),
		dbURL: st.dbURL, bases: st.bases, reapers: st.reaperNames, rec: h.rec}
	if st.pooler != nil {
		// Behind the pooler a reaper's connections are the pooler's: the
		// reaper probe shows the reapers recovered (Config.Pooler).
		h.db.reapers = nil
	}
	if st.psps != nil {
		st.psps.rec = h.rec
		if cfg.Formation != nil {
			h.db.primaryDown = st.psps.primaryDown
		}
	}
	h.dbDone = make(chan error, 1)
	if st.cluster != nil || cfg.Formation != nil {
		go func() { h.dbDone <- h.db.run(ctx, &h.finished, h.clientsDone, cfg.Progress) }()
	} else {
		h.dbDone <- nil
	}

	// The PSP's outages, on a schedule of their own.
	h.outages = &pspOutages{cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x6f757467)), pspURL: st.pspURL, rec: h.rec}
	h.outagesDone = make(chan error, 1)
	go func() { h.outagesDone <- h.outages.run(ctx, h.clientsDone, cfg.Progress) }()
	st.psps.startStretches(ctx, h.clientsDone, cfg.Progress, h.rt, st.apiKey)

	h.chaosDone = make(chan struct{})
	go h.control()
}

// control is the chaos controller: until the clients are done, at random
// intervals, it SIGKILLs a random worker or freezes it (SIGSTOP) past its
// lease, and writes a progress line every ProgressEvery. It closes
// chaosDone when every frozen worker is thawed.
func (h *harness) control() {
	cfg, sum, rnd, workers := h.cfg, h.sum, h.rnd, h.st.workers
	defer close(h.chaosDone)
	var pauses sync.WaitGroup
	defer pauses.Wait()
	progress := time.NewTicker(cfg.ProgressEvery)
	defer progress.Stop()
	for {
		wait := time.Duration(float64(cfg.ChaosInterval) * (0.5 + rnd.Float64()))
		select {
		case <-h.clientsDone:
			return
		case <-progress.C:
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "progress: %d/%d intents final, %d kills, %d pauses, %d database restarts, %s\n",
					h.finished.Load(), cfg.Intents, sum.Kills, sum.Pauses, h.db.restarts.Load(), time.Since(h.start).Truncate(time.Second))
			}
			continue
		case <-time.After(wait):
		}
		if h.db.recovering.Load() {
			continue // see dbChaos.recovering
		}
		w := workers[rnd.IntN(len(workers))]
		if rnd.IntN(10) < 6 {
			w.Signal(syscall.SIGKILL)
			h.rec.Mark("kill", w.Name(), "SIGKILL")
			sum.Kills++
			continue
		}
		if w.Paused() {
			continue
		}
		w.Signal(syscall.SIGSTOP)
		thawed := h.rec.Begin("pause", w.Name(), "SIGSTOP past its lease, then SIGCONT")
		sum.Pauses++
		// Frozen past its lease, so another worker or a reaper takes
		// its keys over and the thawed worker meets the fence.
		thaw := cfg.Lease + 500*time.Millisecond
		pauses.Go(func() {
			time.Sleep(thaw)
			w.Signal(syscall.SIGCONT)
			thawed()
		})
	}
}

// awaitLoad waits for the clients and every fault injector to be done,
// and records the outages.
func (h *harness) awaitLoad(ctx context.Context) error {
	<-h.clientsDone
	<-h.chaosDone
	if err := <-h.dbDone; err != nil {
		return err
	}
	if err := <-h.outagesDone; err != nil {
		return err
	}
	h.sum.Outages, h.sum.OutageTotal = h.outages.count, h.outages.total.Truncate(time.Millisecond).String()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	return nil
}
