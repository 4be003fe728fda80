package webhooks_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// lockedBuffer is a log sink for a deliverer's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// What a tenant reads of a failed attempt (GET /v1/events/{id}/deliveries)
// says what happened in stable words, never the address dialled, the
// resolver or the URL; the raw cause goes to the logs, which never print
// the URL's query (a receiver's token) either, not even when a delivery is
// given up. Main stored `Post "http://127.0.0.1:…/?token=…": dial tcp
// 127.0.0.1:…: connect: connection refused` as the attempt's error and
// logged it when it gave up.
func TestDeliveryErrorsNameNothingInternal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const token = "?token=s3cr3t-receiver-token"

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusedURL := "http://" + closed.Addr().String() + "/hooks" + token
	require.NoError(t, closed.Close())
	failing, _ := receiver(t, func(int) int { return http.StatusInternalServerError })
	hang := newHangingServer(t)
	dropping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(dropping.Close)

	want := map[string]string{}
	for url, words := range map[string]string{
		refusedURL:                        "connection refused",
		failing.URL + "/hooks" + token:    "endpoint answered 500",
		hang.url + "/hooks" + token:       "endpoint timed out after 1 s",
		dropping.URL + "/hooks" + token:   "connection closed without an answer",
		"http://nx.invalid/hooks" + token: "host does not resolve to a public address",
	} {
		want[b.endpoint(t, url).ID] = words
	}
	// Written 3 days ago: each delivery is given up at its first failure.
	past := testdb.Pool(t, b.url, time.Now().Add(-72*time.Hour-time.Minute))
	_, err = events.EnsurePartitions(ctx, past)
	require.NoError(t, err)
	_, err = events.Write(ctx, past, b.tenant, events.ChargeFailed, []byte(`{}`))
	require.NoError(t, err)

	var logs lockedBuffer
	results := b.run(t, webhooks.DelivererConfig{AllowPrivate: true, Timeout: time.Second, Lease: 6 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	t.Cleanup(hang.release)
	got := map[string]string{}
	for range want {
		r := wait(t, results, 10*time.Second)
		require.Equal(t, "failed", r.State, r.EndpointID)
		got[r.EndpointID] = r.Err
	}
	require.Equal(t, want, got)
	text := logs.String()
	require.Contains(t, text, "webhook delivery given up")
	require.Contains(t, text, `"cause":`)
	require.NotContains(t, text, "s3cr3t")
	require.NotContains(t, text, "/hooks")
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		require.NotContains(t, line, "token=", line)
	}
}
