package phases

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/pgfault"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// answerDropper stands between a pool and PostgreSQL. Once armed, it
// swallows the server's answer to the next exchange.
//
// It reads the answer up to its ReadyForQuery, by when the exchange's
// implicit transaction has committed, then cuts the client's connection
// without forwarding a byte. The client sees its commit's answer lost.
type answerDropper struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	cut    chan struct{}
}

func newAnswerDropper(t *testing.T, target string) *answerDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	d := &answerDropper{ln: ln, target: target, cut: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { d.serve(client) })
		}
	})
	return d
}

func (d *answerDropper) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", d.target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() { _, _ = io.Copy(server, client) }()
	var (
		buf   []byte
		chunk = make([]byte, 32<<10)
	)
	for {
		n, err := server.Read(chunk)
		if err != nil {
			return
		}
		if !d.armed.Load() {
			if _, err := client.Write(chunk[:n]); err != nil {
				return
			}
			continue
		}
		// Armed between exchanges, so the answer starts at a message.
		buf = append(buf, chunk[:n]...)
		for len(buf) >= 5 {
			size := 1 + int(binary.BigEndian.Uint32(buf[1:5]))
			if len(buf) < size {
				break
			}
			if buf[0] == 'Z' { // ReadyForQuery: the exchange is over, committed
				d.armed.Store(false)
				d.cut <- struct{}{}
				return // closes both connections: the answer is never read
			}
			buf = buf[size:]
		}
	}
}

// A claim whose answer was lost after the server committed it held its key
// for a whole lease. Nothing ran it, and every retry got 409, because the
// run knew too little of the row to release it.
//
// Now the run finds its claim by what it wrote, and gives the lease up
// once the database answers, counting no attempt. The client's next retry
// takes the key over and finishes it. So too with TIMELINE=off, which
// records no holder.
func TestLostClaimAnswerReleasesTheLease(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		t.Run(map[bool]string{false: "timeline on", true: "timeline off"}[off], func(t *testing.T) {
			t.Parallel()
			testLostClaimAnswerReleasesTheLease(t, off)
		})
	}
}

func testLostClaimAnswerReleasesTheLease(t *testing.T, timelineOff bool) {
	ctx := context.Background()
	w := setupRaw(t)
	var err error
	w.store, err = idempotency.NewStore(idempotency.Config{Lease: time.Minute, TimelineOff: timelineOff})
	require.NoError(t, err)
	u, err := url.Parse(w.url)
	require.NoError(t, err)
	dropper := newAnswerDropper(t, u.Host)
	proxied := *u
	proxied.Host = dropper.ln.Addr().String()
	pool := testdb.Pool(t, proxied.String(), time.Time{}, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	e, op := w.engine(t, pool)

	// Statements prepared on the pool's one connection first, so that the
	// next exchange is the claim itself.
	_, err = Do(ctx, e, op, w.tenant, "warm", pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.NoError(t, err)

	dropper.armed.Store(true)
	_, err = Do(ctx, e, op, w.tenant, "lost", pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.Error(t, err)
	require.True(t, dbstate.Unavailable(err), "%v", err)
	<-dropper.cut
	e.Wait()

	direct := w.pool(t, 0)
	rec, err := w.store.Lookup(ctx, direct, w.tenant, "lost")
	require.NoError(t, err, "the claim committed though its answer was lost")
	require.EqualValues(t, 1, rec.LockVersion)
	require.False(t, rec.Leased, "the lost claim's lease was not released")
	require.Zero(t, rec.Attempts, "a lost answer is not an attempt")

	res, err := Do(ctx, e, op, w.tenant, "lost", pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.NoError(t, err, "the client's retry is not kept waiting for the lease")
	require.Equal(t, OutcomeTakeover, res.Outcome)
	require.Equal(t, 201, res.Response.Status)
}

// A takeover whose answer was lost after it committed held the key for a
// whole lease. Nothing ran it, and every retry got 409.
//
// It is now released once the database answers, counting no attempt. The
// release is fenced by the token and lock_version the takeover wrote, so
// it never ends a later holder's lease. (The reaper's batch takeover:
// internal/reaper, TestLostBatchTakeoverAnswerReleasesTheLeases.)
func TestLostTakeoverAnswerReleasesTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	const key = "a-key-taken-over"
	dead, op := w.engineWith(t, w.pool(t, 0), Config{CrashHook: crashAt(CrashAfterClaim)})
	_, err := Do(ctx, dead, op, w.tenant, key, pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.ErrorIs(t, err, errCrash, "the worker dies holding the key")

	// Its lease ran out: a retry reaches another process, which takes the
	// key over, and the takeover's answer is lost.
	proxy, proxied := pgfault.New(t, w.url)
	later := testdb.Pool(t, proxied, w.t0.Add(2*time.Minute))
	e, op := w.engine(t, later)
	proxy.Arm(pgfault.Fault{Marker: []byte(key), Skip: 1}) // the claim's request carries the key, then the takeover's
	_, err = Do(ctx, e, op, w.tenant, key, pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.Error(t, err)
	require.True(t, dbstate.Unavailable(err), "%v", err)
	<-proxy.Hit()
	e.Wait()

	rec, err := w.store.Lookup(ctx, w.pool(t, 2*time.Minute), w.tenant, key)
	require.NoError(t, err)
	require.EqualValues(t, 2, rec.LockVersion, "the takeover committed though its answer was lost")
	require.False(t, rec.Leased, "the lost takeover's lease was not released")
	require.Zero(t, rec.Attempts, "a lost answer is not an attempt")

	res, err := Do(ctx, e, op, w.tenant, key, pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.NoError(t, err, "the client's retry is not kept waiting for the lease")
	require.Equal(t, OutcomeTakeover, res.Outcome)
	require.Equal(t, 201, res.Response.Status)
}
