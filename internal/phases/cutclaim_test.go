package phases

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/pgfault"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// slowWorld is an engine (one process) on a pool through a claimCutter,
// with an operation whose one foreign call blocks, on its first run, until
// the test lets it go.
type slowWorld struct {
	*rawWorld
	proxy    *pgfault.Proxy
	e        *Engine
	op       *Operation[struct{}]
	calls    atomic.Int32
	inside   chan struct{}
	release  chan struct{}
	released sync.Once
}

func newSlowWorld(t *testing.T, keys idempotency.Config) *slowWorld {
	t.Helper()
	w := &slowWorld{rawWorld: setupRaw(t), inside: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { w.let() })
	keys.Lease = time.Minute
	var err error
	w.store, err = idempotency.NewStore(keys)
	require.NoError(t, err)
	var proxied string
	w.proxy, proxied = pgfault.New(t, w.url)
	pool := testdb.Pool(t, proxied, time.Time{})
	w.e, err = New(pool, w.store, Config{})
	require.NoError(t, err)
	t.Cleanup(w.e.Wait)
	w.op = w.rawWorld.op("things.slow", Phase[struct{}]{
		To: Done,
		Call: func(ctx context.Context, _ *Run[struct{}]) (CallOutcome, error) {
			if w.calls.Add(1) == 1 {
				close(w.inside)
				select {
				case <-w.release:
				case <-ctx.Done():
				}
			}
			return CallOutcome{Class: Success}, nil
		},
		Commit: func(context.Context, *Tx, *Run[struct{}]) (Next, error) {
			return Respond(Response{Status: 201, ContentType: "application/json", Body: []byte(`{}`)}), nil
		},
	})
	Register(w.e, w.op)
	return w
}

func (w *slowWorld) let() { w.released.Do(func() { close(w.release) }) }

func (w *slowWorld) do(ctx context.Context, key string) (Result, error) {
	return Do(ctx, w.e, w.op, w.tenant, key, pokePath("a"), AsSent([]byte(`{"n":1}`)))
}

// A duplicate of a running request reaches the same process, and its claim
// exchange is cut. Its run cannot know whether its claim committed, so it
// released "its" lease once the database answered.
//
// It found that lease by the key's newest incarnation, its fingerprint and
// the process's holder name, which the original shares. So it released
// the original's lease mid call, and the next retry made a second call
// beside the first. A release now matches a token only its own claim wrote.
func TestDuplicateWhoseClaimIsCutReleasesNothing(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		t.Run(map[bool]string{false: "timeline on", true: "timeline off"}[off], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newSlowWorld(t, idempotency.Config{TimelineOff: off})
			original := make(chan error, 1)
			go func() {
				_, err := w.do(ctx, "k")
				original <- err
			}()
			<-w.inside

			// The claim carries its operation's name; no read of the key does.
			w.proxy.Arm(pgfault.Fault{Marker: []byte(w.op.Name), CutRequest: true})
			_, err := w.do(ctx, "k")
			require.Error(t, err)
			require.True(t, dbstate.Unavailable(err), "%v", err)
			<-w.proxy.Hit()
			w.e.Wait() // the cut claim's release, in the background, is over

			rec, err := w.store.Lookup(ctx, w.pool(t, 0), w.tenant, "k")
			require.NoError(t, err)
			require.True(t, rec.Leased, "the duplicate released the lease of the request still running")
			_, err = w.do(ctx, "k")
			require.ErrorIs(t, err, idempotency.ErrInProgress, "the key is the running request's")
			require.EqualValues(t, 1, w.calls.Load(), "one foreign call at a time")

			w.let()
			require.NoError(t, <-original)
			require.EqualValues(t, 1, w.calls.Load())
		})
	}
}
