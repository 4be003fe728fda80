package telemetry

import (
	"io"
	"sync"
)

// LogWriter writes log lines to an io.Writer in batches, without a timer.
// A line is appended to a buffer and one goroutine writes what the buffer
// holds as soon as its previous write is done. At one request at a time
// each line goes out at once, written by that goroutine instead of the
// request's; under load the lines that arrive during one write go out
// together in the next, one write(2) for many requests (the request log's
// write was 13% of a replay's system calls, each behind the handler's
// lock at 32 clients).
//
// What it costs is what a crash takes with it: the lines appended and not
// yet written, those that arrived during the write in progress (a reader
// that blocks the pipe makes it more, up to MaxPending bytes, after which
// a line waits to be appended rather than be dropped). LogHandler flushes
// every line at WARN and above before its Handle returns, so an error is
// written before its process can die of it, and Close writes the rest.
type LogWriter struct {
	w    io.Writer
	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	written  *sync.Cond // a write ended
	pending  []byte     // appended, not yet written
	spare    []byte     // the last written batch's memory
	writing  bool       // a batch is being written
	closed   bool
	writeErr error
}

// MaxPending is how many bytes of lines may wait to be written before a
// line waits to be appended.
const MaxPending = 1 << 20

// NewLogWriter starts a LogWriter on w; Close stops it.
func NewLogWriter(w io.Writer) *LogWriter {
	lw := &LogWriter{w: w, kick: make(chan struct{}, 1), done: make(chan struct{})}
	lw.written = sync.NewCond(&lw.mu)
	lw.wg.Add(1)
	go lw.run()
	return lw
}

// Write appends p, one log line; it writes nothing itself unless the
// writer is closed.
func (lw *LogWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	for len(lw.pending) >= MaxPending && !lw.closed {
		lw.written.Wait()
	}
	if lw.closed {
		lw.mu.Unlock()
		return lw.w.Write(p)
	}
	lw.pending = append(lw.pending, p...)
	lw.mu.Unlock()
	select {
	case lw.kick <- struct{}{}:
	default: // a kick is waiting already
	}
	return len(p), nil
}

// Flush writes every line appended so far before it returns.
func (lw *LogWriter) Flush() error {
	lw.writeBatch()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.writeErr
}

// Close writes the rest and stops the writer; later lines are written at
// once. Safe to call twice.
func (lw *LogWriter) Close() error {
	lw.mu.Lock()
	if lw.closed {
		lw.mu.Unlock()
		return lw.Flush()
	}
	lw.closed = true
	lw.mu.Unlock()
	close(lw.done)
	lw.wg.Wait()
	return lw.Flush()
}

func (lw *LogWriter) run() {
	defer lw.wg.Done()
	for {
		select {
		case <-lw.kick:
			lw.writeBatch()
		case <-lw.done:
			return
		}
	}
}

// writeBatch writes what is pending, after the batch being written if
// any: lines go out in the order they were appended.
func (lw *LogWriter) writeBatch() {
	lw.mu.Lock()
	for lw.writing {
		lw.written.Wait()
	}
	if len(lw.pending) == 0 {
		lw.mu.Unlock()
		return
	}
	batch := lw.pending
	lw.pending, lw.spare = lw.spare[:0], nil
	lw.writing = true
	lw.mu.Unlock()

	_, err := lw.w.Write(batch)

	lw.mu.Lock()
	lw.writing = false
	if err != nil && lw.writeErr == nil {
		lw.writeErr = err
	}
	if cap(batch) <= MaxPending {
		lw.spare = batch[:0]
	}
	lw.written.Broadcast()
	lw.mu.Unlock()
}
