package telemetry_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/telemetry"
)

// gatedWriter records each write; with hold set, its first write waits
// until hold is closed, after telling entered.
type gatedWriter struct {
	hold    chan struct{}
	entered chan struct{}

	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	first := g.writes == 0
	g.mu.Unlock()
	if first && g.hold != nil {
		close(g.entered)
		<-g.hold
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes++
	return g.buf.Write(p)
}

func (g *gatedWriter) text() (string, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String(), g.writes
}

// Every line is written whole, in the order it was appended, however many
// goroutines log at once.
func TestLogWriterKeepsEveryLineWholeAndInOrder(t *testing.T) {
	t.Parallel()
	var w gatedWriter
	lw := telemetry.NewLogWriter(&w)
	var wg sync.WaitGroup
	errs := make(chan error, 8*500)
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				_, err := fmt.Fprintf(lw, "g%d line %d %s\n", g, i, strings.Repeat("x", i%40))
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, lw.Close())
	text, _ := w.text()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	require.Len(t, lines, 8*500)
	next := map[string]int{}
	for _, l := range lines {
		var g string
		var i int
		_, err := fmt.Sscanf(l, "%s line %d", &g, &i)
		require.NoError(t, err, l)
		require.Equal(t, next[g], i, "goroutine %s's lines in order", g)
		require.Equal(t, strings.Repeat("x", i%40), strings.TrimPrefix(l, fmt.Sprintf("%s line %d ", g, i)), "whole")
		next[g] = i + 1
	}
}

// The lines appended while a write is in progress go out together in the
// next write: no timer, one write(2) for many lines under load.
func TestLogWriterWritesWhatArrivedDuringAWriteAtOnce(t *testing.T) {
	t.Parallel()
	w := gatedWriter{hold: make(chan struct{}), entered: make(chan struct{})}
	lw := telemetry.NewLogWriter(&w)
	_, err := lw.Write([]byte("first\n"))
	require.NoError(t, err)
	<-w.entered // the first line's write is in progress, held
	for i := range 100 {
		_, err := fmt.Fprintf(lw, "line %d\n", i)
		require.NoError(t, err)
	}
	close(w.hold)
	require.NoError(t, lw.Close())
	text, writes := w.text()
	require.Equal(t, 101, strings.Count(text, "\n"))
	require.Equal(t, 2, writes, "the first line, then the hundred that came during its write")
}

// A warning is written before the call that logs it returns, with every
// line before it; an info line may wait for the writer.
func TestLoggerWritesWarningsAtOnce(t *testing.T) {
	t.Parallel()
	var w gatedWriter
	lw := telemetry.NewLogWriter(&w)
	defer lw.Close()
	log := telemetry.NewLogger(lw)
	log.InfoContext(context.Background(), "request", "status", 201)
	log.With("component", "reaper").WarnContext(context.Background(), "database unavailable")
	text, _ := w.text()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], `"msg":"request"`)
	require.Contains(t, lines[1], `"level":"WARN"`)
	require.Contains(t, lines[1], `"component":"reaper"`)
}
