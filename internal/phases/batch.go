package phases

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/sqlbatch"
)

// Batching runs the transactions of concurrent requests as one, with one
// statement for all of them where each would send its own.
//
// A request's claim (tx 1) and its commit after the foreign call (tx 2)
// are each a list of queued statements with nothing to read on the way
// (pipeline.go). Requests of the same kind that arrive while a batch of
// that kind is in flight wait, and the next batch takes them all. So there
// is no timer: a request alone goes at once, on its own statements, and a
// crowd shares the cost of a statement (its plan's start-up, its CHECKs,
// the partitions it opens) that PostgreSQL pays per statement, not per row.
//
// Each request keeps every guarantee it has alone:
//
//   - Each row is fenced by its own lock_version, and a form fails whole
//     where its statement would fail for any one request (sqlbatch). A
//     batch that fails with a database error committed nothing, and each
//     of its requests then runs alone, on its own statements, to meet its
//     own outcome there.
//   - A batch whose commit's outcome is unknown (a lost connection) gives
//     every request that error, as one transaction alone would: each key
//     is then recovered by its run or by the reaper, as now.
//   - Two requests for one key never share a batch. Claims take their
//     keys' locks in a sorted order (migrations/00036).
//
// One owner at a time: whoever finds the lane free runs its own request,
// and on finishing hands the lane to the first waiting request, which runs
// the next batch for everyone it takes (flat combining). Waiting requests
// are bounded. Past the bound a request runs alone, waiting for a
// connection like any other.

// BatchConfig configures batching. The zero value batches, with the
// defaults below.
type BatchConfig struct {
	// Off runs every transaction alone (make bench's comparison).
	Off bool
	// Max is the most requests in one batch (default 32).
	Max int
	// Lanes is how many batches of one kind may be in flight at once
	// (default 1).
	Lanes int
	// Waiting bounds the requests waiting for a batch of one kind
	// (default 4·Max).
	Waiting int
}

// Batch defaults.
const (
	DefaultBatchMax   = 32
	DefaultBatchLanes = 1
)

// batchKey is what two requests of one batch must not share.
type batchKey struct {
	tenantID int64
	key      string
}

// batchJob is one request's transaction, waiting for a batch or in one.
type batchJob struct {
	tx   *pipeTx
	key  batchKey
	lead chan []*batchJob // the jobs of the batch this job runs
	done chan struct{}    // closed when err is set
	// alone says the batch failed before committing. The job's own
	// goroutine then runs it alone.
	alone bool
	err   error
}

func (j *batchJob) finish(err error) {
	j.err = err
	close(j.done)
}

// lane is where one kind of transaction waits for its batch.
type lane struct {
	cfg     BatchConfig
	mu      sync.Mutex
	running int // batches in flight, at most cfg.Lanes
	waiting []*batchJob
	stats   *batchStats
}

func newLane(cfg BatchConfig, stats *batchStats) *lane {
	if cfg.Max <= 0 {
		cfg.Max = DefaultBatchMax
	}
	if cfg.Lanes <= 0 {
		cfg.Lanes = DefaultBatchLanes
	}
	if cfg.Waiting <= 0 {
		cfg.Waiting = 4 * cfg.Max
	}
	return &lane{cfg: cfg, stats: stats}
}

// inBatchTx is inPipeTx for a transaction that may share a batch: fn
// queues its statements, and they go out alone or in the lane's next
// batch.
func (e *Engine) inBatchTx(ctx context.Context, l *lane, key batchKey, fn func(tx *Tx) error) error {
	tx := &Tx{p: &pipeTx{pool: e.pool}}
	defer tx.p.release()
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.p.Rollback(ctx))
	}
	if l == nil || !tx.p.batchable() {
		return tx.p.Commit(ctx)
	}
	j := &batchJob{tx: tx.p, key: key, lead: make(chan []*batchJob, 1), done: make(chan struct{})}
	l.submit(ctx, e, j)
	if j.alone {
		return tx.p.Commit(ctx)
	}
	return j.err
}

// batchable reports whether the transaction may go out in a batch: it
// has only queued statements, each with a set-based form.
func (t *pipeTx) batchable() bool {
	if t.conn != nil || t.open || t.autocommit || t.err != nil || t.closed || len(t.pending) == 0 {
		return false
	}
	for _, q := range t.pending {
		if _, ok := sqlbatch.Of(q.sql); !ok {
			return false
		}
	}
	return true
}

// sameShape reports whether a and b queue the same statements, so that
// their statements can go out as one.
func sameShape(a, b *pipeTx) bool {
	return slices.EqualFunc(a.pending, b.pending, func(x, y queued) bool {
		return x.sql == y.sql && len(x.args) == len(y.args) && (x.scan == nil) == (y.scan == nil)
	})
}

// submit runs j, alone or in a batch, and returns once j.done is closed.
func (l *lane) submit(ctx context.Context, e *Engine, j *batchJob) {
	l.mu.Lock()
	if l.running < l.cfg.Lanes {
		l.running++
		l.mu.Unlock()
		e.runBatch(ctx, []*batchJob{j})
		l.handOn(e)
		return
	}
	if len(l.waiting) >= l.cfg.Waiting {
		// Back-pressure: a full queue sends the request alone, to wait
		// for a connection of the pool like any other.
		l.mu.Unlock()
		j.alone = true
		close(j.done)
		return
	}
	l.waiting = append(l.waiting, j)
	l.mu.Unlock()
	select {
	case jobs := <-j.lead:
		e.runBatch(ctx, jobs)
		l.handOn(e)
	case <-j.done:
	case <-ctx.Done():
		if l.withdraw(j) {
			j.finish(notSentError{ctx.Err()})
			return
		}
		// Taken into a batch already: it ends with that batch.
		select {
		case jobs := <-j.lead:
			e.runBatch(ctx, jobs)
			l.handOn(e)
		case <-j.done:
		}
	}
	<-j.done
}

// withdraw takes j out of the waiting requests, if it is still there.
func (l *lane) withdraw(j *batchJob) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.Index(l.waiting, j)
	if i < 0 {
		return false
	}
	l.waiting = slices.Delete(l.waiting, i, i+1)
	return true
}

// handOn gives the lane to the first waiting request, with the batch it is
// to run, or frees it.
func (l *lane) handOn(e *Engine) {
	l.mu.Lock()
	if len(l.waiting) == 0 {
		l.running--
		l.mu.Unlock()
		return
	}
	jobs := l.take()
	l.mu.Unlock()
	jobs[0].lead <- jobs
}

// take removes the next batch from the waiting requests: the first, and
// after it, in order, those of the same shape and another key, up to Max.
// The rest keep their places.
func (l *lane) take() []*batchJob {
	first := l.waiting[0]
	jobs := []*batchJob{first}
	keys := map[batchKey]struct{}{first.key: {}}
	rest := l.waiting[:0]
	for _, j := range l.waiting[1:] {
		if _, dup := keys[j.key]; len(jobs) < l.cfg.Max && !dup && sameShape(first.tx, j.tx) {
			jobs = append(jobs, j)
			keys[j.key] = struct{}{}
			continue
		}
		rest = append(rest, j)
	}
	clear(l.waiting[len(rest):])
	l.waiting = rest
	return jobs
}

// runBatch runs jobs. One goes alone, on its own statements; more go out
// as one set-based statement for each of theirs (batchsend.go).
func (e *Engine) runBatch(ctx context.Context, jobs []*batchJob) {
	if len(jobs) == 1 {
		j := jobs[0]
		j.finish(j.tx.Commit(ctx))
		return
	}
	errs, err := e.sendBatch(ctx, jobs)
	e.batches.record(len(jobs), errors.Is(err, errBatchRefused))
	e.tel.batches.Add(ctx, 1)
	e.tel.batched.Add(ctx, int64(len(jobs)))
	for i, j := range jobs {
		switch {
		case errors.Is(err, errBatchRefused):
			j.alone = true
			j.finish(nil)
		case err != nil:
			j.finish(err)
		default:
			j.finish(errs[i])
		}
	}
}

// batchStats counts batches, for make bench's mean batch size.
type batchStats struct {
	mu sync.Mutex
	BatchStats
}

func (s *batchStats) record(n int, refused bool) {
	s.mu.Lock()
	s.Batches++
	s.Requests += int64(n)
	if refused {
		s.Refused++
	}
	s.mu.Unlock()
}

// BatchStats counts the batches of more than one request that ran.
type BatchStats struct {
	Batches, Requests int64
	// Refused counts the batches the database refused, whose requests
	// then ran alone.
	Refused int64
}

// BatchStats returns the batches run since the engine started.
func (e *Engine) BatchStats() BatchStats {
	e.batches.mu.Lock()
	defer e.batches.mu.Unlock()
	return e.batches.BatchStats
}

// lanes are the engine's two kinds of batchable transaction.
type lanes struct {
	claims  *lane // tx 1: a claim and the phases that commit with it
	commits *lane // tx 2: the phases after a foreign call
}

func newLanes(cfg BatchConfig, stats *batchStats) lanes {
	if cfg.Off {
		return lanes{}
	}
	return lanes{claims: newLane(cfg, stats), commits: newLane(cfg, stats)}
}

// keyOf is the batch key of a lease's key.
func keyOf(l *idempotency.Lease) batchKey {
	return batchKey{tenantID: l.Record.TenantID, key: l.Record.Key}
}
